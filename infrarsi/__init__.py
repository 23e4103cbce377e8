"""InfraRSI: make distributed LLM training faster without changing what it computes.

Where things are: the five CLI verbs (init, doctor, run, report, apply; ``tune`` runs all five) live in
``infrarsi.stages``, one module each, and wire the concept packages: ``contract`` (the referee),
``knobs`` (what may change), ``adapters`` (how each framework spells, launches and logs it),
``execute`` (running trials), ``doctor`` (baseline and noise), ``priors``, ``models`` and ``search``
(what to try next), ``bank`` (experience across runs), ``report`` and ``apply``, ``kernels`` (patch
verification). ``infrarsi.transformer`` is the one model of the network being trained (shape, parameters,
FLOPs, memory terms); ``infrarsi.io`` the one atomic write. docs/architecture.md has the map and
follows one setting from the contract to the report.
"""

__version__ = "0.1.0"
