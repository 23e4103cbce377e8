"""The verify step: the best settings of a search rerun interleaved with the baseline (A B A B ...), pairs that
another job disturbed rerun, and promotion by :func:`~infrarsi.search.verify.promote` (the paired speedup's
95% CI) and the contract's loss invariant. The statistics live in ``search/verify.py``; this module runs the
pairs and records them (RunDir's verification progress and verification records).

Every verify trial on disk is accounted for: a finished pair the progress does not name (the runner died
between the pair and its record, or the record was rolled back) is taken into it, never run again; a pair a
restart cut in half is recorded as run again, with why, and the report lists it. So a pair cannot be re-rolled
until the interval clears."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..contract import contract_hash
from ..contract.numerics import drift_of
from ..execute.runner import unisolated
from ..execute.trial import Trial, TrialStatus
from ..knobs import Setting
from ..rundir import RerunPair, RunDir, Verification, VerificationProgress
from .tuner import Tuner
from .verify import promote, speedup_ci

if TYPE_CHECKING:
    from rich.console import Console


def reverify(run_dir: Path, contract, record, runner, tuner: Tuner, baseline: Setting, base_losses, noise,
              console: Console, on_pair: Callable[[str], None] = lambda subject: None) -> Verification:
    """Interleaved A/B re-runs of the top candidates (``tuner.top``, the baseline left out); promotion by the CI rule
    and the loss invariant. Resumable: the pairs run so far are kept in the verification progress record. Writes
    and returns the verification record. Each pair is printed as it finishes; ``on_pair(subject)`` is told which
    pair runs next (the live progress line)."""
    repeats = max(2, min(noise.repeats_for_target, 4))
    top = to_verify(tuner.top(3), baseline)
    out: dict[str, Any] = {"repeats": repeats, "mde": noise.mde, "baseline": baseline.to_dict(), "candidates": [],
                           "rule": "promote when the 95% CI lower bound of the paired speedup > 1 + mde and the loss "
                                   "trace matches the baseline within the contract"}
    run = RunDir(run_dir)
    recorded = run.progress()
    progress = account(recorded.model_copy(deep=True), record.trials(), baseline)  # key -> [(baseline, candidate)]
    if progress != recorded:
        run.write_progress(progress)
    for n_cand, cand in enumerate(top, 1):
        ids = progress.pairs.setdefault(cand.key(), [])
        pairs: list[tuple[Trial, Trial]] = [(record.get(a), record.get(b)) for a, b in ids]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        disturbed: list[tuple[Trial, Trial]] = []
        while True:
            used = [p for p in pairs if p not in disturbed]
            while len(used) < repeats:  # A then B, back to back: drifts of the machine cancel in the pair
                on_pair(f"verify: candidate {n_cand} of {len(top)}, pair {len(used) + 1} of {repeats}")
                a = runner.submit(baseline, role="verify", reference_losses=base_losses).result()
                b = runner.submit(cand, role="verify", reference_losses=base_losses).result()
                console.print(f"  verify candidate {n_cand} of {len(top)}, pair {len(used) + 1} of {repeats}: "
                              f"baseline {_ms(a)}, candidate {_ms(b)} (trials {a.id}, {b.id})", highlight=False)
                pairs.append((a, b))
                used.append((a, b))
                ids.append((a.id, b.id))
                run.write_progress(progress)
            bad = disturbed_pairs(used)
            if not bad or len(disturbed) >= MAX_DISTURBED:
                break
            disturbed += bad[: MAX_DISTURBED - len(disturbed)]
        pairs = [p for p in pairs if p not in disturbed]
        ok_pairs = [(a, b) for a, b in pairs if a.status is TrialStatus.OK and b.status is TrialStatus.OK]
        entry: dict[str, Any] = {"setting": cand.to_dict(), "why": tuner.why(cand),
                                 "trials": [[a.id, b.id] for a, b in pairs]}
        if disturbed:
            entry["disturbed"] = {"trials": [[a.id, b.id] for a, b in disturbed],
                                  "reason": f"a run took over {DISTURBED_FACTOR:g}x the median of its side: another job "
                                            f"shared the machine; the pair was run again"}
        if len(ok_pairs) < 2:
            entry.update(promoted=False, reason=f"only {len(ok_pairs)} of {len(pairs)} pairs ran ok")
        else:
            sp = speedup_ci([a.metrics.step_time_s for a, _ in ok_pairs], [b.metrics.step_time_s for _, b in ok_pairs])
            passed, why = promote(sp, noise.mde)
            drift = drift_of(base_losses, contract, cand, ok_pairs[0][1].metrics)
            if drift:
                passed, why = False, f"loss invariant broken: {drift}"
            bare, refused = isolation_gate(contract, ok_pairs)
            if bare:
                entry["unisolated"] = bare
                if refused:
                    passed, why = False, refused
                elif passed:
                    why = f"{why} (on evidence from {len(bare)} unisolated trials: the contract allows it)"
            entry.update(sp.to_dict(), promoted=passed, reason=why,
                         baseline_s=[a.metrics.step_time_s for a, _ in ok_pairs],
                         candidate_s=[b.metrics.step_time_s for _, b in ok_pairs],
                         peak_memory_bytes=max((b.metrics.peak_memory_bytes or 0) for _, b in ok_pairs) or None,
                         baseline_peak_memory_bytes=max((a.metrics.peak_memory_bytes or 0) for a, _ in ok_pairs) or None,
                         mfu=_median([b.metrics.mfu for _, b in ok_pairs]),
                         baseline_mfu=_median([a.metrics.mfu for a, _ in ok_pairs]))
        out["candidates"].append(entry)
        changes = ", ".join(f"{k}={v}" for k, v in cand.items() if baseline.get(k) != v) or "the baseline"
        console.print(f"  verified candidate {n_cand} of {len(top)} ({changes}): "
                      f"{'[green]promoted[/]' if entry['promoted'] else 'not promoted'}: {entry['reason']}",
                      highlight=False)
    out["contract_sha256"] = contract_hash(contract)
    out["finished_at"] = time.time()
    out["rerun"] = progress.rerun
    return run.write_verification(out)


def account(progress: VerificationProgress, trials: list[Trial], baseline: Setting) -> VerificationProgress:
    """``progress`` with every finished verify trial it does not name accounted for: a whole pair (the baseline,
    then a candidate, back to back, neither cancelled) joins its candidate's pairs, as if its record had been
    written; the rest (a pair a restart cut short) is recorded as run again, with why."""
    known = progress.accounted()
    loose = sorted((t for t in trials if t.role == "verify" and t.status.is_finished() and t.id not in known),
                   key=lambda t: t.id)
    base = baseline.to_dict()
    now = time.time()
    i = 0
    while i < len(loose):
        a = loose[i]
        b = loose[i + 1] if i + 1 < len(loose) else None
        if a.setting == base and b is not None and b.id == a.id + 1 and b.setting != base:
            if TrialStatus.CANCELLED not in (a.status, b.status):
                progress.pairs.setdefault(Setting(b.setting).key(), []).append((a.id, b.id))
            else:
                cut = a if a.status is TrialStatus.CANCELLED else b
                progress.rerun.append(RerunPair(candidate=b.setting, trials=[a.id, b.id], at=now,
                                                reason=f"trial {cut.id} did not finish ({cut.reason or cut.status.value})"))
            i += 2
            continue
        what = "the baseline's run" if a.setting == base else "the candidate's run"
        other = "its candidate's never started" if a.setting == base else "its baseline's is not on disk"
        progress.rerun.append(RerunPair(candidate={} if a.setting == base else a.setting, trials=[a.id], at=now,
                                        reason=f"{what} ({a.status.value}) is half a pair: {other}"
                                               + (f" ({a.reason})" if a.reason else "")))
        i += 1
    return progress


MAX_DISTURBED = 2  # pairs per candidate that may be replaced
DISTURBED_FACTOR = 3.0


def disturbed_pairs(pairs: list[tuple[Trial, Trial]]) -> list[tuple[Trial, Trial]]:
    """Pairs in which one run took more than DISTURBED_FACTOR x the median of its side (A or B): interference
    from another job, not the setting. The rule is the same for both sides, so it cannot favour the candidate.
    Needs 3 ok pairs to tell a median from an outlier."""
    ok = [(a, b) for a, b in pairs if a.status is TrialStatus.OK and b.status is TrialStatus.OK]
    if len(ok) < 3:
        return []
    med_a = statistics.median(a.metrics.step_time_s for a, _ in ok)
    med_b = statistics.median(b.metrics.step_time_s for _, b in ok)
    return [(a, b) for a, b in ok
            if a.metrics.step_time_s > DISTURBED_FACTOR * med_a or b.metrics.step_time_s > DISTURBED_FACTOR * med_b]


def isolation_gate(contract, pairs: list[tuple[Trial, Trial]]) -> tuple[list[int], str | None]:
    """(ids of the pairs' trials that ran without isolation, why the candidate may not be promoted on them or
    None): such evidence needs the contract's ``invariants.isolation.allow_unisolated``."""
    bare = [t.id for pair in pairs for t in pair if unisolated(t)]
    if not bare or contract.invariants.isolation.allow_unisolated:
        return bare, None
    return bare, (f"not promoted: {len(bare)} of its {2 * len(pairs)} verification trials ran without isolation "
                  f"({_ids(bare)}); set invariants.isolation.allow_unisolated = true in the contract to promote on "
                  f"such evidence")


def _ids(ids: list[int]) -> str:
    return "trials " + ", ".join(map(str, ids[:8])) + (" ..." if len(ids) > 8 else "")


def _median(xs: list) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def _ms(t: Trial) -> str:
    """A verify trial's step time for the progress line, or its status when it did not run ok."""
    return f"{t.metrics.step_time_s * 1000:.0f} ms/step" if t.status is TrialStatus.OK and t.metrics.step_time_s \
        else t.status.value


def to_verify(ranked: list[Setting], baseline: Setting, k: int = 2) -> list[Setting]:
    """The first ``k`` settings the time model ranks (best first) above the baseline: one it ranks below the
    baseline has no speedup to verify, and its pairs would only spend the budget."""
    return (ranked[:ranked.index(baseline)] if baseline in ranked else ranked)[:k]
