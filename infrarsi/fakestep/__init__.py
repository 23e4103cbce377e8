"""One training step under fake tensors, and what it says: the step on a fake process group with per-rank memory
tracking (:mod:`.track`), the estimate it gives (:mod:`.result`: peak bytes by category, ``EstimateError``) and
what no tensor tracker sees, as measured constants (:mod:`.overhead`). Framework-free: each framework's estimate
(``adapters/<framework>/``, named by its adapter's ``estimate_module``) builds its model and steps it with these,
and ``infrarsi.estimate`` asks the contract's adapter for it."""
