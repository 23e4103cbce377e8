"""Two candidates verified together share each round's baseline run (B1 A B2, then B2 A B1; verify/reverify.py):
with real trials, each pair is back to back and the baseline runs once per round; a killed run's loose trials are
paired the same way on resume; and two candidates the search set clearly apart are verified one after the other."""

from __future__ import annotations

import io

from rich.console import Console

from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.knobs import Setting
from infrarsi.rundir import VerificationProgress
from infrarsi.search import Outcome
from infrarsi.trial import Metrics, Trial, TrialStatus
from infrarsi.verify.reverify import _Arm, account, reverify, together
from infrarsi.verify.speedup import first_look_lower
from tests.execute.toy import ToyAdapter, toy_contract
from tests.verify.toy_doctor import measured_baseline


def test_two_candidates_share_each_rounds_baseline_run_and_each_pair_is_back_to_back(tmp_path):
    """Real toy processes (4 steps): the baseline at 100 ms a step, two candidates at 20 ms (~5x, the same speed).
    Their pairs run in rounds of three trials: one baseline run per round, each candidate's run just before or just
    after it, the candidate that runs first alternating."""
    contract = toy_contract(timeout_s=30)
    contract = contract.model_copy(update={"budget": contract.budget.model_copy(update={"verify_pairs": 4})})
    adapter = ToyAdapter()
    space = adapter.knob_space(contract)
    full = lambda **kw: space.complete({"mode": "ok", **kw})  # noqa: E731
    base, one, two = full(step_ms=100), full(step_ms=20), full(step_ms=20, alloc_mb=64)
    rec = RunRecord(tmp_path)
    out = io.StringIO()
    with Runner(rec, LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5)), adapter, contract) as runner:
        doctor, noise, tuner = measured_baseline(runner, space, contract, base)
        # the time model is told both at the same speed, with no search trial on record: together() has no figures
        # to set them apart (20 ms steps vary by tens of percent under load; its own rule is tested below)
        for s in (one, two):
            tuner.tell(s, Outcome(status="ok", step_time_s=0.025))
        top = [Setting(x).to_dict() for x in tuner.top(3)][:2]
        assert sorted(map(str, top)) == sorted(map(str, [one.to_dict(), two.to_dict()]))
        v = reverify(tmp_path, contract, rec, runner, tuner, Setting(base), doctor[0].metrics.losses, noise,
                     Console(file=out, width=200))
    cands = v.model_dump()["candidates"]
    assert len(cands) == 2 and all(c["promoted"] for c in cands), [c["reason"] for c in cands]
    verify = {t.id: t for t in rec.finished() if t.role == "verify"}
    baseline_runs = sorted(i for i, t in verify.items() if t.setting == base.to_dict())
    pairs = [tuple(p) for c in cands for p in c["trials"]]
    assert len(pairs) == len(verify) - len(baseline_runs) >= 6  # every candidate run is in exactly one pair
    assert all(abs(a - b) == 1 and a in baseline_runs for a, b in pairs)  # back to back with a baseline run
    shared = [a for a in baseline_runs if sum(a == p[0] for p in pairs) == 2]
    assert len(shared) >= 3 and len(baseline_runs) < len(pairs), (baseline_runs, pairs)  # fewer baseline runs
    first = [min((b for a, b in pairs if a == x), key=lambda b: b) for x in shared]  # the run before each A
    assert {Setting(verify[b].setting).to_dict() == cands[0]["setting"] for b in first[:2]} == {True, False}
    assert "verify candidate 2 of 2, pair 1 (at most 4)" in out.getvalue()


def _t(i: int, setting: dict, status: str = "ok") -> Trial:
    return Trial(id=i, setting=setting, status=status, role="verify", metrics=Metrics(step_time_s=1.0),
                 reason="interrupted by a restart of the runner" if status == "cancelled" else "")


def test_loose_trials_of_shared_rounds_are_paired_on_resume_as_they_ran():
    """A run killed between a round's trials and their record: each loose candidate run joins the baseline run just
    before it (A B), else just after it (B1 of B1 A B2), once per candidate; a cut pair is recorded as run again."""
    base, c1, c2 = {"x": 0}, {"x": 1}, {"x": 2}
    k1, k2 = Setting(c1).key(), Setting(c2).key()
    b = Setting(base)
    # B1 A B2 | B2 A B1, nothing recorded yet
    got = account(VerificationProgress(), [_t(10, c1), _t(11, base), _t(12, c2), _t(13, c2), _t(14, base),
                                           _t(15, c1)], b)
    assert got.pairs == {k1: [(11, 10), (14, 15)], k2: [(11, 12), (14, 13)]} and not got.rerun
    # the classic A B A B still pairs as it ran
    got = account(VerificationProgress(), [_t(4, base), _t(5, c1), _t(6, base), _t(7, c1)], b)
    assert got.pairs == {k1: [(4, 5), (6, 7)]} and not got.rerun
    # (A, B1) recorded, B2 finished after it: B2 joins the same A
    got = account(VerificationProgress(pairs={k1: [(11, 10)]}), [_t(10, c1), _t(11, base), _t(12, c2)], b)
    assert got.pairs == {k1: [(11, 10)], k2: [(11, 12)]}
    # B1 finished, its A cut by the kill: run again, with why; a lone B2 whose A was cut likewise
    got = account(VerificationProgress(), [_t(20, c1), _t(21, base, "cancelled")], b)
    assert got.pairs == {} and [r.trials for r in got.rerun] == [[21, 20]]
    assert "trial 21 did not finish (interrupted by a restart" in got.rerun[0].reason
    got = account(VerificationProgress(), [_t(30, base)], b)
    assert [r.trials for r in got.rerun] == [[30]] and "its candidate's never started" in got.rerun[0].reason


def test_candidates_the_search_set_clearly_apart_are_verified_one_after_the_other():
    """The second candidate's search speedup's upper bound under the lower bound a first look would give the first's:
    the first's promotion would likely skip the second before any pair, so they are not verified together; a second
    merely measured slower in the search (inside that bound) is."""
    base, c1, c2 = {"x": 0}, {"x": 1}, {"x": 2}
    doctor = [Trial(id=i, setting=base, status="ok", role="doctor", metrics=Metrics(step_time_s=s))
              for i, s in enumerate((1.00, 1.02, 0.98))]

    def arms_with(t2: float) -> tuple[list[_Arm], list[Trial]]:
        search = [Trial(id=5, setting=c1, status="ok", role="search", metrics=Metrics(step_time_s=0.25)),
                  Trial(id=6, setting=c2, status="ok", role="search", metrics=Metrics(step_time_s=t2))]
        return [_Arm(n=1, cand=Setting(c1), ids=[], pairs=[]), _Arm(n=2, cand=Setting(c2), ids=[], pairs=[])], \
            doctor + search

    # doctor spread 2% (sd of log of 1.00, 1.02, 0.98), 3% the doctor's CV: s = 0.03 x sqrt(1/3 + 1) = 3.46%;
    # the first look's lower bound of 4x: 4 x exp(-t_{1-0.00625, 2} x 0.03 x sqrt(2) / sqrt(3)) = 4 x 0.805 = 3.22
    lower = first_look_lower(4.0, cv=0.03, max_pairs=12)
    assert 3.1 < lower < 3.3, lower
    assert together(*arms_with(0.26), cv=0.03, max_pairs=12)  # 3.85x beside 4x: as good as the first
    assert together(*arms_with(0.30), cv=0.03, max_pairs=12)  # 3.33x: upper 3.33 x exp(1.96 x 3.46%) = 3.57 > 3.22
    assert not together(*arms_with(0.6), cv=0.03, max_pairs=12)  # 1.67x: upper 1.78 < 3.22, clearly below
    arms, trials = arms_with(0.6)
    assert together(arms, trials[:3], cv=0.03, max_pairs=12)  # no search figures: nothing sets them apart
    assert not together(arms[:1], trials, cv=0.03, max_pairs=12)  # one candidate: nothing to share
    arms[0].pairs.append((trials[0], trials[0]))  # resumed after the first's pairs alone: the second after it
    assert not together(arms, trials[:3], cv=0.03, max_pairs=12)


def test_the_benchmark_prints_its_table_with_both_arms():
    """scripts/bench_shared_rounds.py (BENCHMARKS.md's table) with 2 draws a case: every case has a row with both
    arms' device-seconds, and the apart case, verified one after the other in both arms, costs the same in both."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "scripts" / "bench_shared_rounds.py"), "--draws", "2"],
                       capture_output=True, text=True, timeout=300, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line.split(" | ") for line in r.stdout.splitlines() if line.startswith("| ") and "CV" in line]
    assert len(rows) == 5 and all(len(row) == 7 for row in rows), r.stdout
    apart = next(row for row in rows if row[0].startswith("| apart"))
    assert apart[1] == apart[2] and apart[3] == "1.00", apart  # the gate kept them one after the other
    assert float(next(row for row in rows if "demo-like" in row[0])[3]) < 1.0, r.stdout  # a baseline run saved
