"""The five CLI verbs, one module each: ``init``, ``doctor``, ``run``, ``report``, ``apply`` (and ``tune``,
which runs them in order). Each is ``run(...) -> exit code``: it reads the run directory, calls the
packages that do the work (``contract``, ``doctor``, ``search``, ``bank``, ``report``, ``apply``, ...) and
writes its stage's files. The work itself belongs in those packages, not here."""
