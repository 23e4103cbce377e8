"""What a finished (or stopped) run says to a script: the ``--json`` object of ``infrarsi run`` and ``tune``.

Read from the run directory's records only, so it is the same whether the run finished now or earlier. Shape
(docs/cli.md#json-output):

    {"run_dir": str, "exit_code": int, "outcome": "promoted" | "no_promotion" | "unfinished",
     "search": {"trials": int, "budget": int, "stop_reason": str} | null,
     "baseline": {knob: value} | null,
     "candidates": [{"changes": {knob: value}, "promoted": bool, "speedup": float | null,
                     "ci95": [lo, hi] | null, "pairs": int | null, "reason": str}],
     "best": <the promoted candidate whose 95% CI has the highest lower bound (ties: speedup)> | null}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import exitcodes
from ..report.audit import best_of
from ..rundir import RunDir


def run_outcome(run_dir: Path, exit_code: int) -> dict[str, Any]:
    """The object above; "unfinished" before the verification, or when the command was interrupted (exit 130)."""
    run = RunDir(run_dir)
    stages = run.stages() if run.has_lock() else None
    search = stages.search if stages else None
    ver = run.verification() if stages else None
    cands = []
    for c in ver.candidates if ver else []:
        changes = {k: v for k, v in c.setting.items() if ver.baseline.get(k) != v}
        cands.append({"changes": changes, "promoted": c.promoted, "speedup": c.speedup,
                      "ci95": list(c.ci95) if c.ci95 else None, "pairs": c.pairs, "reason": c.reason})
    promoted = [c for c in cands if c["promoted"]]
    best = best_of(promoted)  # the highest lower bound, ties by the point estimate
    return {"run_dir": str(run_dir), "exit_code": exit_code,
            "outcome": "unfinished" if ver is None or exit_code == exitcodes.INTERRUPTED else (
                "promoted" if promoted else "no_promotion"),
            "search": {"trials": search.trials, "budget": search.budget, "stop_reason": search.stop_reason}
            if search else None,
            "baseline": ver.baseline if ver else None, "candidates": cands, "best": best}
