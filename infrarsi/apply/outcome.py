"""What ``infrarsi apply`` did, as one value: the stage prints it and ``--json`` writes it (docs/cli.md#apply).

    {"applied": bool, "dry_run": bool, "repo": str, "commit": str | null, "files": [str],
     "candidate": {"changes": {knob: value}, "speedup": float, "ci95": [lo, hi], "trials": [[b, c], ...],
                   "promoted": int} | null,
     "refused": str | null, "replaces": str | null, "diff": str}        ("diff": a dry run that got that far only)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class AppliedCandidate:
    """The promoted candidate apply writes: its changes off the baseline, its speedup and 95% CI, its A/B pairs
    (baseline trial id, candidate trial id), and how many candidates were promoted."""

    changes: dict[str, Any]
    speedup: float
    ci95: tuple[float, float] | None
    trials: tuple[tuple[int, int], ...]
    promoted: int

    def to_dict(self) -> dict[str, Any]:
        return {"changes": dict(self.changes), "speedup": self.speedup, "ci95": list(self.ci95 or []),
                "trials": [list(p) for p in self.trials], "promoted": self.promoted}


@dataclass(frozen=True, kw_only=True)
class ApplyOutcome:
    """How apply ended: ``code`` (exitcodes: 0 applied or shown, 3 nothing promoted, 1 refused) and what the JSON
    object says, plus what the stage prints with it (``notes``, the dry run's ``message``, the hooks that ran)."""

    code: int
    dry_run: bool
    repo: str  # as given, until the git tree's root is known (then the root)
    applied: bool = False
    commit: str | None = None  # the commit's sha (None: none made)
    files: tuple[str, ...] = ()  # the paths written, relative to the repository
    candidate: AppliedCandidate | None = None
    refused: str | None = None  # the one line apply refused with
    replaces: str | None = None  # the earlier tuned launch this one replaces, in words
    diff: str | None = None  # a dry run's unified diff ("" when the tree already holds the change); None: none shown
    notes: tuple[str, ...] = ()  # a dry run's notes (a folder that is no git tree, a dirty tree)
    message: str | None = None  # a dry run's commit message
    hooks: bool = True  # the repository's hooks were run (False: --no-verify)
    hooks_ran: tuple[str, ...] = ()  # the hooks the repository has, which the commit ran

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object's fields (the CLI adds ``run_dir`` and ``exit_code``)."""
        out = {"applied": self.applied, "dry_run": self.dry_run, "repo": self.repo, "commit": self.commit,
               "files": list(self.files), "candidate": self.candidate.to_dict() if self.candidate else None,
               "refused": self.refused, "replaces": self.replaces}
        if self.diff is not None:
            out["diff"] = self.diff
        return out
