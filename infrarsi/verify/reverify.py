"""The verify step: the best settings of a search rerun interleaved with the baseline (A B A B ...; two candidates
together share each round's baseline run, B1 A B2 B2 A B1 ...), pairs that another job disturbed rerun, and
promotion by the sequential rule of :mod:`.speedup` (the paired speedup's 95% CI) and the contract's loss invariant.
The statistics live in ``speedup.py``; this module runs the pairs and records them (RunDir's verification progress
and verification records).

Every verify trial on disk is accounted for: a finished pair the progress does not name (the runner died
between the pair and its record, or the record was rolled back) is taken into it, never run again; a pair a
restart cut in half is recorded as run again, with why, and the report lists it. So a pair cannot be re-rolled
until the interval clears."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..contract import contract_hash
from ..contract.numerics import drift_of
from ..execute.conditions import drift, load_of
from ..execute.end_to_end import pair_times
from ..execute.runner import unisolated
from ..trial import Proposal, Trial, TrialStatus
from ..knobs import Setting
from ..rundir import RerunPair, RunDir, Verification, VerificationProgress
from ..trial.verified import Disturbed, VerifiedCandidate
from ..search.tuner import Tuner
from .speedup import FIRST_LOOK, LEVEL, Decision, decide, first_look_lower, outranked_before_pairs, search_speedup

if TYPE_CHECKING:
    from rich.console import Console

    from ..contract.model import Contract
    from ..execute.record import RunRecord
    from ..execute.runner import Runner


def reverify(run_dir: Path, contract: Contract, record: RunRecord, runner: Runner, tuner: Tuner, baseline: Setting, base_losses, noise,
              console: Console, on_pair: Callable[[str, int], None] = lambda subject, left: None,
              share: bool = True) -> Verification:
    """Interleaved A/B re-runs of the top candidates (``tuner.top``, the baseline left out), added one pair at a time
    until the sequential rule decides (verify/speedup.py) or ``budget.verify_pairs`` run out; promotion by that rule and
    the loss invariant. Two candidates are verified together, each round's one baseline run shared by both (B1 A B2,
    then B2 A B1: each pair back to back, which side runs first alternating), unless the search's figures set the
    second so far below the first that the first's promotion would likely skip it (:func:`together`): then one after
    the other, so that the second can be skipped before any pair. Resumable: the pairs run so far are kept in the
    verification progress record. Writes and returns the verification record. Each pair is printed as it finishes;
    ``on_pair(subject, left)`` is told which round runs next and the most rounds left, this one included (the live
    line and its ETA).
    ``share=False``: one candidate after the other always (the ablation of scripts/bench_shared_rounds.py)."""
    max_pairs = contract.budget.verify_pairs
    top = to_verify(tuner.top(3), baseline)
    rule = (f"pairs added one at a time (at most {max_pairs}); promote when the sequential interval's lower bound "
            f"(alpha spent over the looks) > 1 + mde and the loss trace matches the baseline within the contract; "
            f"stop when its upper bound < 1 + mde, or < the lower bound of a candidate already promoted; two "
            f"candidates verified together share each round's baseline run (B1 A B2, the order alternating)")
    run = RunDir(run_dir)
    recorded = run.progress()
    progress = account(recorded.model_copy(deep=True), record.trials(), baseline)  # key -> [(baseline, candidate)]
    if progress != recorded:
        run.write_progress(progress)
    startup = contract.invariants.timing.startup_allowance_s
    arms = []
    for n, cand in enumerate(top, 1):
        ids = progress.pairs.setdefault(cand.key(), [])
        pairs = [(record.get(x), record.get(y)) for x, y in ids]
        arms.append(_Arm(n=n, cand=cand, ids=ids, pairs=[(x, y) for x, y in pairs if x is not None and y is not None]))
    best_lo: list[float] = []  # the highest lower bound promoted so far: a later look below it stops early

    def start(arm: _Arm) -> bool:
        """Whether ``arm`` gets pairs: not when its pairs could only end outranked (speedup.py)."""
        lo = max(best_lo) if best_lo else None
        skip = None if arm.pairs else outranked_before_pairs(*_search_figures(arm.cand, record.trials()),
                                                             cv=noise.cv, outrank=lo)
        if skip is None:
            return True
        arm.entry = VerifiedCandidate(setting=arm.cand.to_dict(), why=tuner.why(arm.cand), trials=[], promoted=False,
                                      decision="outranked", reason=skip)
        console.print(f"  candidate {arm.n} of {len(top)}: {skip}", highlight=False)
        return False

    def finish(arm: _Arm) -> None:
        entry = _verified(arm.cand, tuner.why(arm.cand), arm.used, arm.disturbed, arm.ok_pairs, arm.times, arm.d,
                          contract, base_losses)
        entry.explanation = explain(arm.cand, record.trials(), arm.ok_pairs, arm.times, noise, promoted=entry.promoted)
        if entry.promoted:
            best_lo.append(entry.ci95[0])
        arm.entry = entry
        changes = ", ".join(f"{k}={v}" for k, v in arm.cand.items() if baseline.get(k) != v) or "the baseline"
        console.print(f"  verified candidate {arm.n} of {len(top)} ({changes}): "
                      f"{'[green]promoted[/]' if entry.promoted else 'not promoted'}: {entry.reason}",
                      highlight=False)
        if entry.explanation:
            console.print(f"    {entry.explanation}")

    def pair(arm: _Arm, a: Trial, b: Trial) -> None:
        arm.pairs.append((a, b))
        arm.ids.append((a.id, b.id))
        run.write_progress(progress)
        console.print(f"  verify candidate {arm.n} of {len(top)}, pair {len(arm.pairs)} (at most {max_pairs}): "
                      f"{_pair_line(a, b)}", highlight=False)

    groups = [arms] if share and together(arms, record.trials(), noise.cv, max_pairs) else [[arm] for arm in arms]
    rounds = 0
    for n_group, group in enumerate(groups):
        running = [arm for arm in group if start(arm)]
        while running:
            for arm in list(running):  # in rank order: a promotion counts for the looks after it
                if arm.look(mde=noise.mde, max_pairs=max_pairs, outrank=max(best_lo) if best_lo else None,
                            startup=startup):
                    finish(arm)
                    running.remove(arm)
            if not running:
                break
            ns = " and ".join(str(arm.n) for arm in running)
            left = max(max_pairs - len(arm.used) for arm in running) + max_pairs * sum(map(len, groups[n_group + 1:]))
            on_pair(f"verify: candidate{'s' if len(running) > 1 else ''} {ns} of {len(top)}, pair "
                    f"{min(len(arm.used) for arm in running) + 1} (at most {max_pairs})", left)
            if len(running) == 1:  # A then B, back to back: drifts of the machine cancel in the pair
                a = runner.submit(baseline, role="verify", reference_losses=base_losses).result()
                pair(running[0], a, runner.submit(running[0].cand, role="verify",
                                                  reference_losses=base_losses).result())
            else:  # B1 A B2, then B2 A B1: one baseline run, each pair back to back, each side first in turn
                first, second = running if rounds % 2 == 0 else running[::-1]
                b1 = runner.submit(first.cand, role="verify", reference_losses=base_losses).result()
                a = runner.submit(baseline, role="verify", reference_losses=base_losses).result()
                pair(first, a, b1)
                pair(second, a, runner.submit(second.cand, role="verify", reference_losses=base_losses).result())
            rounds += 1
    verified = [arm.entry for arm in arms if arm.entry is not None]
    return run.write_verification(Verification(repeats=max_pairs, mde=noise.mde, baseline=baseline.to_dict(),
                                               candidates=verified, rule=rule, contract_sha256=contract_hash(contract),
                                               finished_at=time.time(), rerun=progress.rerun))


@dataclass
class _Arm:
    """One candidate's verification: its pairs so far and where the sequential rule stands after :meth:`look`."""

    n: int  # its rank among the candidates, 1-based
    cand: Setting
    ids: list  # progress.pairs[cand.key()] itself: [(baseline id, candidate id)], appended as pairs run
    pairs: list[tuple[Trial, Trial]]
    disturbed: list[tuple[Trial, Trial]] = field(default_factory=list)  # set aside and run again
    used: list[tuple[Trial, Trial]] = field(default_factory=list)  # the pairs the decision uses
    ok_pairs: list[tuple[Trial, Trial]] = field(default_factory=list)
    times: list[tuple[float, float, str]] = field(default_factory=list)  # pair_times of each ok pair
    d: Decision | None = None
    entry: VerifiedCandidate | None = None

    def look(self, *, mde: float, max_pairs: int, outrank: float | None, startup: float) -> bool:
        """The sequential rule on the pairs so far (pairs another job disturbed set aside first): True when no more
        pairs are to run (decided, out of pairs, or a candidate or baseline that keeps failing)."""
        while True:
            self.used = [p for p in self.pairs if p not in self.disturbed]
            bad = [p for p in disturbed_pairs(self.used) if len(self.disturbed) < MAX_DISTURBED]
            if not bad:
                break
            self.disturbed += bad[: MAX_DISTURBED - len(self.disturbed)]
        self.ok_pairs = [(a, b) for a, b in self.used if a.status is TrialStatus.OK and b.status is TrialStatus.OK]
        # the candidate held to its pair's end-to-end time: what the decision, the record and the words use
        self.times = [pair_times(a, b, startup=startup) for a, b in self.ok_pairs]
        self.d = decide([x[0] for x in self.times], [x[1] for x in self.times], mde=mde, max_pairs=max_pairs,
                        outrank=outrank)
        return (self.d.done or len(self.used) >= max_pairs
                or len(self.used) - len(self.ok_pairs) >= FIRST_LOOK)


def together(arms: list[_Arm], trials: list[Trial], cv: float, max_pairs: int) -> bool:
    """Whether two candidates are verified together (each round's baseline run shared): yes, unless the first's
    promotion would likely skip the second before any pair (speedup.outranked_before_pairs): the second's search
    speedup's upper bound under the lower bound a first look would give the first's search speedup
    (speedup.first_look_lower at the search's spread). There the shared rounds would pay pairs that skip saves.
    Either way each candidate's rule is the same."""
    if len(arms) != 2 or (arms[0].pairs and not arms[1].pairs):
        return False  # one candidate; or a run resumed after the first's pairs alone: the second after it, as it was
    one = search_speedup(*_search_figures(arms[0].cand, trials), cv=cv)
    two = search_speedup(*_search_figures(arms[1].cand, trials), cv=cv)
    if one is None or two is None:
        return True
    return two[2] >= first_look_lower(one[0], cv=one[3], max_pairs=max_pairs)


def _verified(cand: Setting, why: Proposal | None, pairs: list[tuple[Trial, Trial]],
              disturbed: list[tuple[Trial, Trial]], ok_pairs: list[tuple[Trial, Trial]],
              times: list[tuple[float, float, str]], d: Decision, contract: Contract, base_losses) -> VerifiedCandidate:
    """One candidate's verdict from its pairs (``pairs``: those the verdict uses; ``disturbed``: those set aside and
    run again; ``times``: ``pair_times`` of each of ``ok_pairs``, as ``d`` used them) and the sequential rule's
    decision ``d``, after the loss invariant and the isolation gate."""
    moved = Disturbed(trials=[(a.id, b.id) for a, b in disturbed],
                      reason=f"a run took over {DISTURBED_FACTOR:g}x the median of its side: another job shared the "
                             f"machine; the pair was run again") if disturbed else None
    ran = [(a.id, b.id) for a, b in pairs]
    bounded = [note for *_, note in times if note]
    if d.speedup is None:
        return VerifiedCandidate(setting=cand.to_dict(), why=why, trials=ran, disturbed=moved, end_to_end=bounded,
                                 promoted=False,
                                 reason=f"only {len(ok_pairs)} of {len(pairs)} pairs ran ok (the rule needs "
                                        f"{FIRST_LOOK})")
    sp = d.speedup
    passed, reason = d.promoted, d.reason
    drift = drift_of(base_losses, contract, cand, ok_pairs[0][1].metrics)
    if drift:
        passed, reason = False, f"loss invariant broken: {drift}"
    bare, refused = isolation_gate(contract, ok_pairs)
    if bare:
        if refused:
            passed, reason = False, refused
        elif passed:
            reason = f"{reason} (on evidence from {len(bare)} unisolated trials: the contract allows it)"
    return VerifiedCandidate(
        setting=cand.to_dict(), why=why, trials=ran, disturbed=moved, unisolated=list(bare or []), end_to_end=bounded,
        promoted=passed,
        reason=reason, speedup=sp.speedup, ci95=(sp.lo, sp.hi), pairs=sp.pairs, level=LEVEL, decision=d.state,
        baseline_s=[x[0] for x in times], candidate_s=[x[1] for x in times],
        peak_memory_bytes=max((b.metrics.peak_memory_bytes or 0) for _, b in ok_pairs) or None,
        baseline_peak_memory_bytes=max((a.metrics.peak_memory_bytes or 0) for a, _ in ok_pairs) or None,
        mfu=_median([b.metrics.mfu for _, b in ok_pairs]), baseline_mfu=_median([a.metrics.mfu for a, _ in ok_pairs]))


def _pair_line(a: Trial, b: Trial) -> str:
    def one(t: Trial) -> str:
        return f"{t.metrics.step_time_s:.4g} s" if t.status is TrialStatus.OK else t.status.value
    return f"baseline {one(a)}, candidate {one(b)} (trials {a.id}/{b.id})"


def _span(xs: list[float]) -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:.3g} s" if abs(hi - lo) < 0.005 * hi else f"{lo:.3g}-{hi:.3g} s"


def _load_words(ts: list[Trial]) -> str:
    la = load_of(t.conditions for t in ts)
    return "" if la is None else f" at load average {la:.1f}"


def explain(cand: Setting, trials: list[Trial], ok_pairs: list[tuple[Trial, Trial]],
            times: list[tuple[float, float, str]], noise, *, promoted: bool) -> str:
    """A candidate that did not reproduce, in words: its search figures and its A/B figures side by side, with the
    conditions of each ("" for a promoted candidate, or one without a search trial or pairs to compare). ``times``:
    ``pair_times`` of each of ``ok_pairs`` (seconds), the figures the decision used."""
    if promoted or not ok_pairs:
        return ""
    base, seen = _search_trials(cand, trials)
    if not seen or not base:
        return ""
    s_b, s_c = [t.metrics.step_time_s for t in base], [t.metrics.step_time_s for t in seen]
    v_b, v_c = [x[0] for x in times], [x[1] for x in times]
    bounded = sum(bool(x[2]) for x in times)
    search_x = statistics.median(s_b) / statistics.median(s_c)
    ab_x = statistics.median(v_b) / statistics.median(v_c)
    verdict = ("it did not reproduce" if ab_x < 1 + 0.5 * (search_x - 1) else
               "its pairs agree with the search, but the interval could not clear the bar")
    words = (f"{verdict}: in the search it ran at {_span(s_c)}/step against the baseline's {_span(s_b)}"
             f"{_load_words(seen + base)} ({search_x:.2f}x); in the A/B pairs it ran at {_span(v_c)}/step against "
             f"the baseline's {_span(v_b)}{_load_words([t for p in ok_pairs for t in p])} ({ab_x:.2f}x)"
             + (f", {bounded} of its {len(times)} pairs scored by their end-to-end bound (its start-up is charged "
                f"to its steps)" if bounded else ""))
    shift = drift("during the search", load_of(t.conditions for t in seen + base), "during verification",
                  load_of(t.conditions for p in ok_pairs for t in p))
    return words + (f"; the machine changed: {shift}" if shift else "")


def _search_trials(cand: Setting, trials: list[Trial]) -> tuple[list[Trial], list[Trial]]:
    """(the baseline's ok doctor and re-baseline trials, ``cand``'s ok search trials)."""
    ok = [t for t in trials if t.status is TrialStatus.OK]
    return ([t for t in ok if t.role in ("doctor", "rebaseline")],
            [t for t in ok if t.role == "search" and t.setting == cand.to_dict()])


def _search_figures(cand: Setting, trials: list[Trial]) -> tuple[list[float], list[float]]:
    """(the baseline's ok doctor and re-baselined step times, ``cand``'s ok search step times), seconds."""
    base, seen = _search_trials(cand, trials)
    return [t.metrics.step_time_s for t in base], [t.metrics.step_time_s for t in seen]


def account(progress: VerificationProgress, trials: list[Trial], baseline: Setting) -> VerificationProgress:
    """``progress`` with every finished verify trial it does not name accounted for: a candidate's run and the
    baseline's run next to it (just before it, A B; else just after it, the B1 of B1 A B2), neither cancelled and not
    yet paired with that candidate, join its candidate's pairs, as if their record had been written; the rest (a
    pair a restart cut short) is recorded as run again, with why."""
    known = progress.accounted()
    done = {t.id: t for t in trials if t.role == "verify" and t.status.is_finished()}
    base = baseline.to_dict()
    paired = {(a, key) for key, ps in progress.pairs.items() for a, _ in ps}  # (baseline id, candidate key)
    taken: set[int] = set()  # loose baseline runs now in a pair or a rerun record
    now = time.time()
    for b in sorted((t for t in done.values() if t.id not in known and t.setting != base), key=lambda t: t.id):
        key = Setting(b.setting).key()
        a = next((done[i] for i in (b.id - 1, b.id + 1)
                  if i in done and done[i].setting == base and (i, key) not in paired), None)
        if a is None:
            why = f"the candidate's run ({b.status.value}) is half a pair: its baseline's is not on disk"
            progress.rerun.append(RerunPair(candidate=b.setting, trials=[b.id], at=now,
                                            reason=why + (f" ({b.reason})" if b.reason else "")))
            continue
        if TrialStatus.CANCELLED in (a.status, b.status):
            cut = a if a.status is TrialStatus.CANCELLED else b
            progress.rerun.append(RerunPair(candidate=b.setting, trials=[i for i in (a.id, b.id) if i not in known],
                                            at=now, reason=f"trial {cut.id} did not finish "
                                                           f"({cut.reason or cut.status.value})"))
        else:
            progress.pairs.setdefault(key, []).append((a.id, b.id))
            paired.add((a.id, key))
        taken.add(a.id)
    for a in sorted((t for t in done.values() if t.id not in known and t.id not in taken and t.setting == base),
                    key=lambda t: t.id):
        progress.rerun.append(RerunPair(candidate={}, trials=[a.id], at=now,
                                        reason=f"the baseline's run ({a.status.value}) is half a pair: its candidate's "
                                               f"never started" + (f" ({a.reason})" if a.reason else "")))
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


def isolation_gate(contract: Contract, pairs: list[tuple[Trial, Trial]]) -> tuple[list[int], str | None]:
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


def to_verify(ranked: list[Setting], baseline: Setting, k: int = 2) -> list[Setting]:
    """The first ``k`` settings the time model ranks (best first) above the baseline: one it ranks below the
    baseline has no speedup to verify, and its pairs would only spend the budget."""
    return (ranked[:ranked.index(baseline)] if baseline in ranked else ranked)[:k]
