"""`infrarsi init --from-request ... --yes` with an LLM draft (the real openai client against the loopback server):
a draft is held to the request and to the referee's floor. A draft that loosens the loss, timing or spot-check
settings, or whose environment changes what the workload fixes, is never locked; one that widens the scope
beyond the request is refused under --yes and listed for the user's confirmation without it."""

from __future__ import annotations

import json
import tomllib

import pytest
from typer.testing import CliRunner

from infrarsi.cli import app
from infrarsi.contract import Contract
from infrarsi.contract.model import Loss, Timing
from infrarsi.stages.draft import draft_contract, to_toml
from infrarsi.testing.openai_server import Reply

from .test_draft import SCRIPT

# The global batch comes from a variable the job's environment may set (Megatron's examples do this).
GBS_SCRIPT = SCRIPT.replace("TP=2\n", "TP=2\nGBS=${GBS:-256}\n").replace("--global-batch-size 256", "--global-batch-size $GBS")
FORBIDS = "Make training faster on our 16 H100s. Don't change the precision, and no kernel changes."
ALLOWS = "Make training faster on our 16 H100s. Don't touch the data pipeline, and keep the parallel layout fixed."


@pytest.fixture
def launch(tmp_path):
    p = tmp_path / "train_gpt.sh"
    p.write_text(GBS_SCRIPT)
    return p


@pytest.fixture
def endpoint(server, monkeypatch):
    """The environment names the loopback server, as a user's shell names their endpoint."""
    def use():
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("INFRARSI_LLM_MODEL", "test-model")
        monkeypatch.setenv("OPENAI_API_KEY", "x")
    return use


def _llm_draft(request, launch, edit):
    """The offline draft (which follows the request), edited as a careless or hostile LLM would."""
    data = tomllib.loads(draft_contract(request, launch))
    edit(data)
    return to_toml(data)


def _init(request, launch, run, *more):
    return CliRunner().invoke(app, ["init", "--from-request", request, "--launch", str(launch), "--run-dir", str(run),
                                    *more])


def _locked(run) -> Contract:
    return Contract.model_validate(json.loads((run / "contract.lock").read_text())["contract"])


def test_a_draft_that_puts_forbidden_topics_into_scope_is_not_locked(server, endpoint, launch, tmp_path):
    def cheat(d):
        d["scope"]["knobs"]["bf16"] = [False, True]
        d["scope"]["files"] = ["**/*.py"]

    text = _llm_draft(FORBIDS, launch, cheat)
    server.script(Reply(json={"toml": text, "notes": "bf16 is faster"}), Reply(json={"toml": text, "notes": ""}))
    endpoint()
    run = tmp_path / "run"
    r = _init(FORBIDS, launch, run, "--yes")
    assert r.exit_code == 0, r.output
    c = _locked(run)
    assert "bf16" not in c.scope.knobs and c.scope.files == []  # the request's scope, not the draft's
    told = server.requests[1]["messages"][-1]["content"]
    assert "scope.knobs.bf16" in told and "off limits" in told and "scope.files '**/*.py'" in told


def test_a_draft_that_loosens_the_referee_is_not_locked(server, endpoint, launch, tmp_path):
    def loosen(d):
        d["invariants"] = {"loss": {"exact_rtol": 0.05, "compare_steps": 1}, "timing": {"measured_steps": 1},
                           "isolation": {"allow_unisolated": True}}
        d["workload"]["env"] = {"INFRARSI_SPOT_EVERY": "0"}

    text = _llm_draft(ALLOWS, launch, loosen)
    server.script(Reply(json={"toml": text, "notes": ""}), Reply(json={"toml": text, "notes": ""}))
    endpoint()
    run = tmp_path / "run"
    r = _init(ALLOWS, launch, run, "--yes")
    assert r.exit_code == 0, r.output
    c = _locked(run)
    assert c.invariants.loss == Loss() and c.invariants.timing == Timing() and "INFRARSI_SPOT_EVERY" not in c.workload.env
    assert not c.invariants.isolation.allow_unisolated
    told = server.requests[1]["messages"][-1]["content"]
    for field in ("invariants.loss.exact_rtol", "invariants.loss.compare_steps", "invariants.timing.measured_steps",
                  "workload.env.INFRARSI_SPOT_EVERY", "invariants.isolation.allow_unisolated"):
        assert field in told, told


def test_a_draft_may_tighten_the_referee(server, endpoint, launch, tmp_path):
    def tighten(d):
        d["invariants"] = {"loss": {"exact_rtol": 1e-5, "compare_steps": 8}, "timing": {"measured_steps": 6}}
        d["workload"]["env"] = {"INFRARSI_SPOT_EVERY": "10"}

    server.script(Reply(json={"toml": _llm_draft(ALLOWS, launch, tighten), "notes": ""}))
    endpoint()
    run = tmp_path / "run"
    r = _init(ALLOWS, launch, run, "--yes")
    assert r.exit_code == 0, r.output
    c = _locked(run)
    assert (c.invariants.loss.exact_rtol, c.invariants.loss.compare_steps, c.invariants.timing.measured_steps) == (1e-5, 8, 6)
    assert c.workload.env == {"INFRARSI_SPOT_EVERY": "10"}


def test_script_env_that_changes_the_global_batch_is_not_locked(server, endpoint, launch, tmp_path):
    def batch(d):
        d["workload"]["script_env"] = {"GBS": "512"}

    text = _llm_draft(ALLOWS, launch, batch)
    server.script(Reply(json={"toml": text, "notes": ""}), Reply(json={"toml": text, "notes": ""}))
    endpoint()
    run = tmp_path / "run"
    r = _init(ALLOWS, launch, run, "--yes")
    assert r.exit_code == 0, r.output
    c = _locked(run)
    assert c.workload.args["global_batch_size"] == 256 and "GBS" not in c.workload.script_env
    told = server.requests[1]["messages"][-1]["content"]
    assert "workload.script_env GBS='512' would change the fixed workload argument global_batch_size" in told, told
    # The same contract written by hand is refused by `infrarsi init` itself: the lock would say 256, the launch 512.
    by_hand = tmp_path / "by-hand.toml"
    by_hand.write_text(text)
    r = CliRunner().invoke(app, ["init", str(by_hand), "--run-dir", str(tmp_path / "run2")])
    assert r.exit_code == 1 and "GBS='512' would change the fixed workload argument global_batch_size" in " ".join(
        r.output.split()), r.output
    assert not (tmp_path / "run2" / "contract.lock").exists()


def test_a_wider_scope_is_refused_under_yes_and_listed_without(server, endpoint, launch, tmp_path):
    def widen(d):
        d["scope"]["files"] = ["**/*.py"]  # the request allows kernels; every Python file of the repository is more

    text = _llm_draft(ALLOWS, launch, widen)
    server.script(Reply(json={"toml": text, "notes": ""}), Reply(json={"toml": text, "notes": ""}))
    endpoint()
    run = tmp_path / "run"
    r = _init(ALLOWS, launch, run, "--yes")
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and "widens the scope beyond the request" in out, r.output
    assert "scope.files '**/*.py' is wider than the request's ['kernels/**/*.py']" in out
    assert not (run / "contract.lock").exists()
    draft = tmp_path / "run.contract.toml"
    assert tomllib.loads(draft.read_text())["scope"]["files"] == ["**/*.py"]  # kept for the user to review

    server.script(Reply(json={"toml": text, "notes": ""}))
    r = _init(ALLOWS, launch, run)
    out = " ".join(r.output.split())
    assert r.exit_code == 0 and "confirm each before you lock it" in out and "scope.files '**/*.py'" in out, r.output
    assert not (run / "contract.lock").exists()
