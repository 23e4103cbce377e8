"""What the report says about the machine's conditions: the load in each phase of the run, the drift between them,
and the knob effects that verification, run under other conditions, did not bear out.

The knob effects come from the search's trials; verification reruns the best settings later, beside the baseline.
When a candidate does not reproduce, the effects of the knob values it changed were measured under other conditions
than its verification: they are named, with both figures, so the report never says "2 threads cut step time by 40%"
above a verification that found the setting 0.35x without saying so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..execute.conditions import drift, load_of
from ..trial import Trial
from ..rundir import EffectRecord
from ..trial.verified import VerifiedCandidate
from .audit import changed

PHASES = (("doctor", ("doctor", "warmup"), "while the doctor measured the baseline"),
          ("search", ("search", "rebaseline"), "during the search"),
          ("verify", ("verify",), "during verification"))


def phase_loads(trials: Sequence[Trial]) -> dict[str, float]:
    """Phase -> the median load average of its trials (phases without a recorded load left out)."""
    out = {}
    for name, roles, _ in PHASES:
        la = load_of(t.conditions for t in trials if t.role in roles)
        if la is not None:
            out[name] = la
    return out


def drift_lines(trials: Sequence[Trial]) -> list[str]:
    """One sentence per shift of the load between consecutive phases ("load average rose from 1.2 during the search to
    6.0 during verification")."""
    loads = phase_loads(trials)
    words = {name: w for name, _, w in PHASES}
    names = [n for n, _, _ in PHASES if n in loads]
    out = []
    for a, b in zip(names, names[1:]):
        line = drift(words[a], loads[a], words[b], loads[b])
        if line:
            out.append(line[0].upper() + line[1:] + ".")
    return out


def unreproduced_effects(effects: Sequence[EffectRecord], candidates: Sequence[VerifiedCandidate],
                         baseline: Mapping[str, Any]) -> dict[str, str]:
    """Effect feature -> why it is flagged: a knob value that a candidate which did not reproduce changed (its
    explanation, with the search and A/B figures)."""
    flagged: dict[str, str] = {}
    for c in candidates:
        if c.promoted or not c.explanation.startswith("it did not reproduce"):
            continue
        values = {f"{k}={v}" for k, v in changed(c.setting, baseline).items()}
        for e in effects:
            parts = set(e.feature.split("*"))
            if parts & values and e.feature not in flagged:
                flagged[e.feature] = c.explanation
    return flagged
