"""InfraRSI: make distributed LLM training faster without changing what it computes.

Where things are: the five CLI verbs (init, doctor, run, report, apply; ``tune`` runs all five) live in
``infrarsi.stages``, one module each, and wire the concept packages: ``contract`` (the referee),
``knobs`` (what may change), ``adapters`` (how each framework spells, launches and logs it),
``execute`` (running trials), ``doctor`` (baseline and noise), ``priors``, ``models`` and ``search``
(what to try next), ``verify`` (the A/B pairs and the rule that promotes), ``bank`` (experience across
runs), ``report`` and ``apply``, ``kernels`` (patch verification). ``infrarsi.transformer`` is the one model of the network being trained (shape, parameters,
FLOPs, memory terms); ``infrarsi.io`` the one atomic write. docs/architecture.md has the map (drawn from
the tree by scripts/gen_docs.py) and follows one setting from the contract to the report, as below.

One setting, from the contract to the report: ``contract/model.py`` reads the contract and
``contract/lock.py`` fixes it (init); the ``Workload`` (``adapters/workload.py``) binds it to its folder and
adapter; the adapter turns the contract's scope into a ``KnobSpace`` from ``knobs/catalog.py``; ``priors/``
gives each knob value a prior, ``bank/seed.py`` adds past runs' settings and effects, and ``estimate/run.py``
the memory offset; the ``Tuner`` (``search/tuner.py``) asks for a ``Setting``; the adapter's ``launch`` turns it
into a ``LaunchSpec`` (``trial/launch.py``), which ``adapters/equivalence.py`` reads back with the framework's
own config code before anything runs; ``execute/runner.py`` runs it on an executor, inside
``execute/isolation.py``; the adapter parses the log, and ``execute/classify.py`` gives the ``Trial`` its
status, recorded under ``trials/<n>/`` through ``rundir/`` (sealed); the trial goes back to the tuner
(``tell``), whose parts (``search/time.py``, ``search/memory.py``) learn from it; at the end of the search
``search/record.py`` writes what its models fitted (``rundir/models.py``); ``verify/reverify.py`` re-runs the
best against the baseline and ``verify/speedup.py``'s rule promotes; ``report/`` reads it all back
(``report/load.py``) and prints the speedup and MFU (``report/mfu.py``, FLOPs from ``transformer.py``);
``apply/writer.py`` plans the change and ``apply/transaction.py`` writes it as one commit.
"""

__version__ = "0.1.0"
