"""The report's cost section (report/cost.py): device-seconds per phase, what pruning and skipping saved, and what
they risked; the same figures in `run --json` (stages/outcome.py)."""

from __future__ import annotations

import pytest

from infrarsi.execute.record import RunRecord
from infrarsi.trial import Cost, Metrics, Trial, TrialStatus
from infrarsi.report import load_run
from infrarsi.report.cost import run_cost
from infrarsi.report.render import build, to_markdown
from infrarsi.stages.outcome import run_outcome


def _t(i: int, role: str, status: TrialStatus, *, wall: float, step: float | None = None, steps: int = 0,
       setting: dict | None = None, devices: int = 2) -> Trial:
    return Trial(id=i, setting=setting or {"mbs": i}, role=role, status=status, cost=Cost(wall_s=wall, devices=devices),
                 metrics=Metrics(step_time_s=step, step_times_s=[step or 1.0] * steps))


def test_phases_savings_and_risks_arithmetic():
    trials = [_t(0, "doctor", TrialStatus.OK, wall=10, step=1.0, steps=10),
              _t(1, "search", TrialStatus.OK, wall=12, step=1.2, steps=10),
              _t(2, "rebaseline", TrialStatus.OK, wall=10, step=1.0, steps=10),
              _t(3, "search", TrialStatus.PRUNED, wall=6, step=2.0, steps=4, setting={"mbs": 8}),
              _t(4, "search", TrialStatus.OOM, wall=3),
              _t(5, "search", TrialStatus.SKIPPED, wall=0, setting={"mbs": 16}),
              _t(6, "verify", TrialStatus.OK, wall=11, step=1.5, steps=10, setting={"mbs": 8}),
              _t(7, "search", TrialStatus.RUNNING, wall=0)]
    c = run_cost(trials)
    assert c.phases == {"doctor": (1, 20.0), "search": (5, 62.0), "verification": (1, 22.0)}  # wall x 2 devices
    assert c.pruned == [3] and c.pruned_spent_s == 12.0
    assert c.pruned_saved_s == (10 - 4) * 2.0 * 2  # the 6 steps left at its 2.0 s lower bound, on 2 devices
    assert c.skipped == [5] and c.skipped_saved_s == 6.0 and "1 OOM trial" in c.launch_basis  # an OOM's 3 s x 2
    assert c.risked == ["trial 3 was pruned at >= 2 s/step, trial 6 (verify) ran it at 1.5 s/step"]
    assert c.rows()[-1] == ("total", "7", "104.0", "100%", "no clock", "no clock")  # no trial here has a clock record
    assert c.to_dict()["pruned"] == {"trials": [3], "spent_device_s": 12.0, "saved_device_s_at_least": 24.0}
    # the doctor's warm-up and seed runs are the doctor's
    doctor = [_t(0, "warmup", TrialStatus.OK, wall=5, step=1.0),
              _t(1, "doctor-seed-1", TrialStatus.OK, wall=7, step=1.0)]
    assert run_cost(doctor).phases == {"doctor": (2, 24.0)}


def test_the_report_and_run_json_show_the_cost_of_a_recorded_run(run_dir):
    rec = RunRecord(run_dir)
    search = [t for t in rec.finished() if t.role == "search" and t.status is TrialStatus.OK]
    t = rec.start({**search[0].setting, "pruned_copy": 1}, role="search")
    rec.finish(t.model_copy(update={"status": TrialStatus.PRUNED, "cost": Cost(wall_s=4.0, devices=1),
                                    "metrics": Metrics(step_time_s=9.0, step_times_s=[9.0] * 3),
                                    "reason": "slower than the incumbent"}))
    k = rec.start({**search[0].setting, "skipped_copy": 1}, role="search")
    rec.finish(k.model_copy(update={"status": TrialStatus.SKIPPED, "evidence": ["estimated peak ..."]}))
    md = to_markdown(build(load_run(run_dir), sections=["cost"]))
    assert "## Cost" in md and "| doctor |" in md and "| search |" in md and "| verification |" in md
    assert f"Pruning stopped 1 search trial(s) (trials {t.id})" in md and "saved at least" in md
    assert f"Skipping left 1 setting(s) (trials {k.id}) unlaunched" in md
    assert "none: no later trial contradicted a stop" in md
    cost = run_outcome(run_dir, 0)["cost"]
    assert cost["pruned"]["trials"] == [t.id] and cost["skipped"]["trials"] == [k.id]
    assert cost["total_device_s"] == pytest.approx(sum(x.cost.device_s for x in rec.finished()), abs=0.01)


def test_start_up_is_split_from_steps_by_the_harness_clock_of_real_trials(tmp_path):
    """Two real processes through the runner: a 4-step trial (500 ms steps) is start-up from its launch to its first
    step line (at least one step, and at least three steps before its end), steps after; a trial that raises before
    any step is all start-up. The cost table's split is those seconds per phase."""
    from tests.execute.toy import ToyAdapter, toy_contract

    from infrarsi.execute.clock import first_step_s, last_step_s
    from infrarsi.execute.local import LocalExecutor
    from infrarsi.execute.runner import Runner

    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5)), ToyAdapter(), toy_contract()) as runner:
        ok = runner.submit({"mode": "ok", "step_ms": 500}, role="search").result()
        dead = runner.submit({"mode": "exit"}, role="verify").result()
    assert ok.status is TrialStatus.OK and dead.status is not TrialStatus.OK, (ok.reason, dead.reason)
    first = first_step_s(ok.path)
    assert first is not None and 0.5 <= first <= ok.cost.wall_s - 3 * 0.5, (first, ok.cost.wall_s)
    assert first_step_s(dead.path) is None
    c = run_cost(rec.finished())
    assert c.startup["search"] == (1, pytest.approx(first * ok.cost.devices))
    assert c.startup["verification"] == (1, pytest.approx(dead.cost.device_s))  # no step line: all of it
    rows = {r[0]: r for r in c.rows()}
    assert rows["verification"][4] == f"{dead.cost.device_s:.1f} (100%)"
    assert rows["search"][4] == f"{first * ok.cost.devices:.1f} ({first / ok.cost.wall_s:.0%})"
    assert c.to_dict()["startup_device_s"]["search"] == pytest.approx(first * ok.cost.devices, abs=1e-3)
    after = ok.cost.wall_s - last_step_s(ok.path)  # from its last step line to its end (its own exit here)
    assert rows["search"][5] == f"{after * ok.cost.devices:.1f} ({after / ok.cost.wall_s:.0%})"
    assert rows["verification"][5] == "no step line"


def test_a_warm_up_ended_after_its_first_step_line_is_said_apart_from_trials_ended_at_their_last_step(tmp_path):
    """Real toy processes that linger 30 s after their last step line: the doctor's warm-up is ended after its first
    step line, a search trial after its last; the cost's sentence counts only the search trial as ended at its last
    step and says the warm-up's end apart (it was not its last step)."""
    from tests.execute.toy import ToyAdapter, toy_contract

    from infrarsi.execute.local import LocalExecutor
    from infrarsi.execute.runner import Runner
    from infrarsi.trial import WARMUP_ROLE

    rec = RunRecord(tmp_path)
    slow = {"mode": "linger", "step_ms": 100, "linger_s": 30}
    with Runner(rec, LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5)), ToyAdapter(), toy_contract()) as runner:
        warm = runner.submit(slow, role=WARMUP_ROLE).result()
        ran = runner.submit(slow, role="search").result()
    assert warm.status is TrialStatus.OK and ran.status is TrialStatus.OK, (warm.reason, ran.reason)
    assert warm.cost.wall_s < 20 and ran.cost.wall_s < 20  # neither lingered
    c = run_cost(rec.finished())
    assert len(c.ended_tails_s) == 1 and c.warmups_ended == 1
    words = " ".join(c.lines())
    assert "The harness ended 1 trial(s) at their last step" in words
    assert "ended the doctor's warm-up after its first step line (1 run(s)" in words
    assert c.to_dict()["ended_at_last_step"]["warmups_ended_at_first_step"] == 1
