"""The verify step's skip before pairs (speedup.outranked_before_pairs, verify/reverify.py), with real trials: once
a candidate is promoted, a second whose search figures cannot beat its lower bound gets no pair at all."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus
from infrarsi.knobs import Setting
from infrarsi.search import Outcome
from infrarsi.verify.reverify import reverify
from tests.execute.toy import ToyAdapter, toy_contract
from tests.verify.toy_doctor import measured_baseline


@pytest.mark.slow
def test_a_second_candidate_outranked_on_its_search_figures_runs_no_pair(tmp_path):
    """Real toy processes (4 steps): the baseline at 500 ms a step (3 doctor runs), candidate 1 at 20 ms (~25x),
    candidate 2 at 100 ms (~5x), each searched once and told to a real Tuner. Candidate 1 is verified in pairs and
    promoted; candidate 2's search speedup has an upper bound far under candidate 1's lower bound, so it is recorded
    'outranked' with no trials, and no verify trial of its setting exists. Slow (~25 s at load 10: 11 real
    trials); the default tests/verify/test_speedup.py::test_a_candidate_whose_search_figures_cannot_beat_a_promoted_one_*
    and ::test_aa_the_skip_before_pairs_* keep the rule's arithmetic and A/A covered."""
    contract = toy_contract(timeout_s=30)
    contract = contract.model_copy(update={"budget": contract.budget.model_copy(update={"verify_pairs": 4})})
    adapter = ToyAdapter()
    space = adapter.knob_space(contract)
    full = lambda **kw: space.complete({"mode": "ok", **kw})  # noqa: E731
    base, fast, good = full(step_ms=500), full(step_ms=20), full(step_ms=100)
    rec = RunRecord(tmp_path)
    out = io.StringIO()
    with Runner(rec, LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5)), adapter, contract) as runner:
        doctor, noise, tuner = measured_baseline(runner, space, contract, base)
        for s in (fast, good):
            t = runner.submit(s, role="search").result()
            assert t.status is TrialStatus.OK, t.reason
            tuner.tell(s, Outcome(status="ok", step_time_s=t.metrics.step_time_s))
        assert [Setting(x).to_dict() for x in tuner.top(3)][:2] == [fast.to_dict(), good.to_dict()]
        v = reverify(tmp_path, contract, rec, runner, tuner, Setting(base), doctor[0].metrics.losses, noise,
                     Console(file=out, width=200))
    first, second = v.model_dump()["candidates"] if hasattr(v, "model_dump") else v["candidates"]
    assert first["promoted"] and len(first["trials"]) >= 3, first["reason"]
    assert second["decision"] == "outranked" and second["trials"] == [] and not second["promoted"]
    assert second["reason"].startswith("not verified: its search speedup") and "upper bound of" in second["reason"]
    assert f"< {first['ci95'][0]:.3f}" in second["reason"]
    verified = [t.setting for t in rec.finished() if t.role == "verify"]
    assert good.to_dict() not in verified and fast.to_dict() in verified
    assert "candidate 2 of 2: not verified" in out.getvalue()
