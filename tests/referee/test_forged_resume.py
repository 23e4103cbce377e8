"""A sealed in-flight trial whose setting is not one of the run's (a kernel candidate that fails verification on
resume, or a record the run never proposed) is refused in one line and never launched, and the run goes on: its
setting is never told to the search (whose design matrix has no column for it)."""

import json

from infrarsi.execute.record import RunRecord


class _Stopped(Exception):
    """Raised where the run reaches its verification: the search part is what this test is about."""


def test_a_forged_in_flight_kernel_trial_is_refused_in_one_line_and_the_run_goes_on(recorded, cli, monkeypatch):
    record = RunRecord(recorded)
    forged = {**record.get(5).setting, "kernel_rmsnorm": "kernels/rmsnorm/forged.py"}
    tid = record.start(forged, role="search").id  # sealed like any record the run writes
    lines = []
    import infrarsi.stages.run as run_stage
    from infrarsi.stages import run_state

    def reached(*a, **k):
        raise _Stopped()

    monkeypatch.setattr(run_stage, "reverify", reached)
    real = run_state.refuse_outside_space
    monkeypatch.setattr(run_state, "refuse_outside_space",
                        lambda *a, say, **k: real(*a, say=lambda line: (lines.append(line), say(line)), **k))
    try:
        cli("run", "--run-dir", recorded, cwd=recorded.parent)
    except _Stopped:
        pass  # the search part ended without a traceback, and the run went on to its verification
    t = record.get(tid)
    assert t.status.value == "invalid" and t.reason.startswith("not resumed: kernel_rmsnorm='kernels/rmsnorm/forged.py'")
    assert not (recorded / "trials" / str(tid) / "stdout").exists()  # never launched
    assert [ln for ln in lines if f"trial {tid}" in ln] == [lines[0]] and "\n" not in lines[0]
    assert "refused, not resumed" in lines[0] and "the run goes on without it" in lines[0]
    search = json.loads((recorded / "search.json").read_text())
    assert str(tid) not in search.get("proposals", {})
