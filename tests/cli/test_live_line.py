"""The live line of a real run (a simulated 8 x H100 cluster, real trial processes), as a log sees it: it names a
trial by the id the trial's own line prints, and verification's line has an ETA."""

import functools
import io
import re

import pytest
from rich.console import Console

from infrarsi.stages import doctor, init
from infrarsi.stages import run as run_stage


@pytest.mark.slow  # 60-90 s; the default run: tests/test_progress.py (the plain lines, the ETA of the pairs)
def test_the_live_line_names_the_trial_the_log_prints_and_verification_has_an_eta(tmp_path, monkeypatch):
    from tests.faults.conftest import sim_contract, sim_env

    for k, v in sim_env(tmp_path).items():
        monkeypatch.setenv(k, v)
    text = sim_contract(tmp_path, max_trials=3).read_text().replace("doctor_repeats = 3", "doctor_repeats = 2\n"
                                                                                           "verify_pairs = 3")
    contract = tmp_path / "sim.toml"
    contract.write_text(text)
    run_dir = tmp_path / "run"
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=False, width=400, highlight=False)
    assert init.run(contract, run_dir, console=con, err=con) == 0
    assert doctor.run(run_dir, json_out=False, console=con, err=con) == 0
    # a log's plain line every 0.05 s (60 s by default), so each subject the run sets is seen
    monkeypatch.setattr(run_stage, "Heartbeat", functools.partial(run_stage.Heartbeat, plain_every_s=0.05,
                                                                  tick_s=0.01))
    code = run_stage.run(run_dir, max_trials=None, parallel=1, console=con, err=con)
    out = buf.getvalue()
    assert code in (0, 3), out[-3000:]
    live = {int(m[1]): int(m[2]) for m in re.finditer(r"\.\.\. run: trial (\d+) \(search (\d+) of 3\)", out)}
    logged = [int(m[1]) for m in re.finditer(r"^  trial +(\d+) ", out, re.M)]
    assert live and logged and set(live) <= set(logged), (live, logged)
    assert [live[i] for i in sorted(live)] == sorted(live.values())  # the search count follows the ids
    assert re.search(r"\.\.\. verify: candidates? 1(?: and 2)? of \d, pair \d \(at most 3\): running [\d:]+; elapsed [\d:]+; "
                     r"ETA at most ~", out), out[-3000:]
