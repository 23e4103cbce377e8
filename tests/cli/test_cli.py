"""The command line a script drives: --version, help in click's conventions, exit codes, --json shapes."""

import json
import os

import pytest

from infrarsi import __version__, exitcodes
from infrarsi.stages import run_state as state
from infrarsi.testing.sealed import rewrite_sealed

from .conftest import run_cli


def test_version():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"infrarsi {__version__}"


def test_help_reads_like_click():
    """Flags print as `--json` (no `<bool>`), arguments as upper-case names, the same way in every verb."""
    for verb in ["tune", "run", "doctor", "report", "apply", "init", "knobs", "estimate", "bank show", "bank export",
                 "kernels verify", "kernels generate"]:
        r = invoke(*verb.split(), "--help")
        assert r.exit_code == 0, r.output
        text = r.output
        assert "{contract}" not in text and "[contract]" not in text, (verb, text)
        assert "<" not in text.split("Options:")[1], (verb, text)  # `--json`, `--seed N`: no `<bool>`, `<int>`
        usage = text.splitlines()[0]
        assert usage == usage.replace(usage.split("[OPTIONS]")[-1], usage.split("[OPTIONS]")[-1].upper()), usage
        if verb in ("run", "report", "apply", "tune", "doctor"):
            assert "--json " in text, (verb, text)
        if verb in ("tune", "estimate"):
            assert "CONTRACT" in usage, usage


def invoke(*args):
    """The CLI in this process (typer's runner): stdout and stderr apart, the exit code."""
    from typer.testing import CliRunner

    from infrarsi.cli import _register_tools, app

    _register_tools()
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def test_bad_usage_exits_2_and_a_bad_slurm_flag_is_one_line(tmp_path):
    assert invoke("run", "--no-such-flag").exit_code == exitcodes.USAGE
    r = invoke("run", "--run-dir", tmp_path, "--partition", "gpu;rm -rf /")
    assert r.exit_code == exitcodes.USAGE and "--partition" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = invoke("tune", tmp_path / "c.toml", "--time", "four hours")
    assert r.exit_code == exitcodes.USAGE and "--time 'four hours'" in r.stderr, r.stderr
    assert "H:M:S (4:00:00)" in r.stderr  # as written: not rich's emoji for ':M:'
    assert "\u24c2" not in run_cli("tune", tmp_path / "c.toml", "--time", "four").stderr
    assert not (tmp_path / "c.toml").exists() and not list(tmp_path.iterdir())  # nothing started


def test_report_and_apply_dry_run_json(run_dir):
    r = invoke("report", "--run-dir", run_dir, "--json")
    assert r.exit_code == 0, r.stderr
    body = json.loads(r.stdout)  # stdout is the JSON only
    assert set(body) == {"run_dir", "exit_code", "markdown", "html", "trials"}
    assert os.path.exists(body["html"]) and body["trials"] > 0
    r = invoke("apply", "--run-dir", run_dir, "--repo", run_dir.parent, "--dry-run", "--json")
    assert r.exit_code == 0, r.stderr
    body = json.loads(r.stdout)
    assert {"applied", "dry_run", "repo", "commit", "files", "candidate", "refused", "diff"} <= set(body)
    assert body["dry_run"] is True and body["applied"] is False and body["commit"] is None
    assert body["candidate"]["speedup"] > 1 and body["candidate"]["changes"]


def test_a_run_that_promoted_nothing_exits_3_and_says_so_in_json(run_dir):
    """A finished run without a promotion: run, apply (and tune) exit 3, not 1 as an error does."""
    v = json.loads((run_dir / "verification.json").read_text())
    for c in v["candidates"]:
        c["promoted"] = False
    rewrite_sealed(run_dir, "verification.json", json.dumps(v))
    state.mark_done(run_dir, "search", stop_reason="budget spent", trials=12, budget=12)
    state.mark_done(run_dir, "verify", promoted=0)
    r = run_cli("run", "--run-dir", run_dir, "--json")
    assert r.returncode == exitcodes.NO_PROMOTION, r.stderr
    body = json.loads(r.stdout)
    assert body["outcome"] == "no_promotion" and body["best"] is None and body["exit_code"] == 3
    assert body["search"] == {"trials": 12, "budget": 12, "stop_reason": "budget spent"}
    assert body["candidates"] and all(not c["promoted"] and c["changes"] for c in body["candidates"])
    r = invoke("apply", "--run-dir", run_dir, "--repo", run_dir.parent, "--json")
    assert r.exit_code == exitcodes.NO_PROMOTION and json.loads(r.stdout)["refused"].startswith("no promoted")


def test_a_cancelled_setting_is_run_again_and_costs_nothing():
    """The rule the resume follows (the slow test tests/cli/test_interrupt.py interrupts a real run)."""
    from infrarsi.trial import Metrics, Trial
    from infrarsi.knobs import Knob, KnobSpace
    from infrarsi.stages.run import interrupted_settings

    space = KnobSpace([Knob(name="mbs", kind="int", domain=(1, 2, 4), default=1)])
    t = [Trial(id=0, setting={"mbs": 2}, status="cancelled", role="search"),
         Trial(id=1, setting={"mbs": 4}, status="cancelled", role="search"),
         Trial(id=2, setting={"mbs": 4}, status="ok", role="search", metrics=Metrics(step_time_s=1.0)),  # measured later: not again
         Trial(id=3, setting={"mbs": 2}, status="cancelled", role="search")]  # the same setting once
    done = [x for x in t if x.status.value != "cancelled"]
    from infrarsi.trial import Proposal
    again = interrupted_settings(t, done, space, {space.complete({"mbs": 2}).key(): Proposal(kind="acquisition", ei=0.1)})
    assert [(s.to_dict(), why.to_dict()) for s, why in again] == [({"mbs": 2}, {"kind": "acquisition", "ei": 0.1, "rerun_of": 0})]


def test_slurm_flags_are_kept_in_the_run_and_shape_every_job(run_dir, monkeypatch, tmp_path):
    """`--partition --account --qos --time` on run: validated, kept in the run directory (a resume with no flags
    submits the same way), written as #SBATCH lines after the environment's, which they override."""
    from infrarsi.execute import make_executor
    from infrarsi.trial import LaunchSpec

    state.mark_done(run_dir, "search", stop_reason="budget spent", trials=12, budget=12)
    state.mark_done(run_dir, "verify", promoted=1)  # a finished run: `run` only says so
    r = invoke("run", "--run-dir", run_dir, "--partition", "gpu-h100", "--account", "ml", "--qos", "high",
               "--time", "4:00:00")
    assert r.exit_code == 0, r.stderr
    assert json.loads((run_dir / "stages.json").read_text())["slurm"] == {
        "partition": "gpu-h100", "account": "ml", "qos": "high", "time": "4:00:00"}
    assert invoke("run", "--run-dir", run_dir, "--qos", "low").exit_code == 0  # one flag again: only it changes
    monkeypatch.setenv("INFRARSI_SLURM_PARTITION", "cpu")  # the fallback loses to the flag kept in the run
    monkeypatch.setenv("INFRARSI_SLURM_ARGS", "--gres=gpu:8")
    monkeypatch.setenv("INFRARSI_ISOLATION", "off")
    ex = make_executor("slurm", run_dir=run_dir)
    lines = ex.script(LaunchSpec(argv=["python", "-c", "pass"], time_limit_s=600), tmp_path / "t", token="tok").splitlines()
    for line in ("#SBATCH --partition=gpu-h100", "#SBATCH --account=ml", "#SBATCH --qos=low", "#SBATCH --gres=gpu:8"):
        assert line in lines, lines
    times = [ln for ln in lines if ln.startswith("#SBATCH --time=")]
    assert times[-1] == "#SBATCH --time=4:00:00"  # sbatch keeps the last: the flag caps the contract's limit


CONTRACT = os.path.join(os.path.dirname(__file__), "..", "..", "contracts", "sim-dense8b-h100x8.toml")


@pytest.mark.parametrize("args, env, says", [
    (["--max-trials", "0"], {}, "--max-trials"),
    (["--apply-to", "{tmp}"], {}, "is not a git work tree"),
    ([], {"INFRARSI_EXECUTOR": "slurmm"}, "unknown executor 'slurmm'"),
    ([], {"INFRARSI_ISOLATION": "maybe"}, "INFRARSI_ISOLATION='maybe'"),
    ([], {"INFRARSI_EXECUTOR": "slurm", "INFRARSI_SLURM_ARGS": "gres=gpu:8"}, "is not one sbatch option"),
    ([], {"INFRARSI_EXECUTOR": "slurm", "SLURM_CONF": "/nonexistent/slurm.conf"},
     "SLURM_CONF=/nonexistent/slurm.conf is not a file"),
])
def test_every_flag_and_the_executor_setting_is_checked_before_the_first_stage(tmp_path, monkeypatch, args, env,
                                                                                says):
    """A bad flag or executor setting is refused (exit 2, naming it) before init: no run directory is made, no
    warm-up or baseline run (hours on a GPU job) happens first."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    run = tmp_path / "run"
    r = invoke("tune", CONTRACT, "--run-dir", run, *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert r.exit_code == exitcodes.USAGE, r.output
    assert says in r.output and not run.exists()


def test_a_run_directory_that_is_a_file_is_bad_usage_in_every_verb(tmp_path):
    """`--run-dir <a file>` (or a path through one) is one usage error, exit 2: not init's FileExistsError
    traceback, nor report's "does not exist"."""
    f = tmp_path / "notes.txt"
    f.write_text("mine\n")
    for verb in (["init", CONTRACT], ["doctor"], ["run"], ["report"], ["apply", "--dry-run"], ["tune", CONTRACT]):
        for where in (f, f / "run"):
            r = invoke(*verb, "--run-dir", where)
            assert r.exit_code == exitcodes.USAGE, (verb, r.output)
            assert "Traceback" not in r.output and f"{where} " in r.output and "is a file" in r.output, r.output
    assert f.read_text() == "mine\n"


def test_a_seed_the_run_directory_cannot_resume_with_is_refused_before_the_first_stage(run_dir):
    """`tune --seed 4` on a run directory whose search started with seed 3: refused at once (exit 2), not after
    the doctor."""
    state.search_seed(run_dir, 3)
    contract = run_dir.parent / "minigpt-cpu.toml"
    before = sorted(p.name for p in run_dir.iterdir())
    r = invoke("tune", contract, "--run-dir", run_dir, "--seed", "4")
    assert r.exit_code == exitcodes.USAGE and "--seed 4: this run directory's search started with seed 3" in r.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == before
    assert invoke("run", "--run-dir", run_dir, "--seed", "4").exit_code == exitcodes.USAGE


def test_a_max_trials_above_the_contracts_budget_is_capped_and_says_so(run_dir):
    state.mark_done(run_dir, "search", stop_reason="budget spent", trials=12, budget=12)
    state.mark_done(run_dir, "verify", promoted=1)
    r = invoke("run", "--run-dir", run_dir, "--max-trials", "1000")
    assert r.exit_code == 0, r.output
    assert "--max-trials 1000 is above the contract's budget.max_trials" in " ".join(r.stdout.split())
