"""Kernel generation through the real openai client and the real verifier: a candidate that fails
verification is fed back once (with the verifier's reasons), the repaired one passes."""

from __future__ import annotations

import pytest

from infrarsi.priors import llm as llm_mod
from infrarsi.priors.llm import LLMConfig, exchanges
from infrarsi.testing.openai_server import OpenAIServer, Reply

from infrarsi.kernels import verify as verify_mod
from infrarsi.kernels.generate import KernelGenerationError, generate_kernel
from infrarsi.kernels.loader import op_of, reference_path

GOOD = reference_path("rmsnorm").parent / "triton_rows.py"  # its constants as written: 4 rows per program


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "INFRARSI_LLM_MODEL", "INFRARSI_LLM"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("INFRARSI_CACHE", str(tmp_path / "cache"))  # LLM and verifier caches start empty
    llm_mod._said.clear()
    llm_mod._mode_memo.clear()


@pytest.fixture
def server():
    with OpenAIServer() as srv:
        yield srv


def test_failed_verification_is_fed_back_once_and_the_repair_passes(server, tmp_path):
    good = GOOD.read_text()
    wrong = good.replace("y = x * rstd[:, None] * w[None, :]", "y = x * rstd[:, None] * w[None, :] * 1.01")
    assert wrong != good
    server.script(Reply(json={"name": "triton_try", "source": wrong, "notes": "4 rows per program"}),
                  Reply(json={"name": "triton_try", "source": good, "notes": "fixed the scale"}))
    llm = LLMConfig(base_url=server.base_url, model="test-model")
    quick = verify_mod.VerifySettings(seeds_per_case=1, families=("odd",), determinism_families=(), determinism_reruns=0)
    path, result = generate_kernel("rmsnorm", llm=llm, out_dir=tmp_path / "generated", record_dir=tmp_path / "run",
                                   verify_settings=quick)
    assert result.verdict == "pass" and path.read_text() == good
    assert path.parent == tmp_path / "generated"
    prompt = server.requests[0]["messages"][-1]["content"]
    assert "def forward(x: torch.Tensor, weight: torch.Tensor, eps: float=1e-06)" in prompt and "FAMILIES" in prompt  # reference, signature, shapes
    feedback = server.requests[1]["messages"][-1]["content"]
    assert "verifier rejected" in feedback and "mismatch-forward" in feedback
    first = tmp_path / "generated" / "triton_try.py"
    assert first.read_text() == wrong and path.name == "triton_try_2.py"  # the rejected file is kept for audit
    assert [e.stage for e in exchanges(tmp_path / "run")] == ["kernel:rmsnorm", "kernel:rmsnorm"]


def test_answers_that_break_the_signature_are_retried_then_refused(server, tmp_path):
    bad = "import triton\n\ndef forward(x):\n    return x\n"
    server.script(Reply(json={"name": "k", "source": bad, "notes": ""}),
                  Reply(json={"name": "Bad Name", "source": "def forward(x, weight, eps=1e-6):\n  return (", "notes": ""}))
    llm = LLMConfig(base_url=server.base_url, model="test-model")
    with pytest.raises(KernelGenerationError, match="no usable answer"):
        generate_kernel("rmsnorm", llm=llm, out_dir=tmp_path / "generated")
    assert "differs from the reference's forward(x,weight,eps)" in server.requests[1]["messages"][-1]["content"]
    assert not list((tmp_path / "generated").glob("*.py"))  # nothing unvalidated is written


def test_no_llm_configured_says_how_to_configure_one(tmp_path):
    with pytest.raises(KernelGenerationError, match="OPENAI_API_KEY"):
        generate_kernel("rmsnorm", llm=None, out_dir=tmp_path)
    with pytest.raises(KernelGenerationError, match="unknown op"):
        generate_kernel("layernorm", llm=LLMConfig(model="m", base_url="http://127.0.0.1:9/v1"), out_dir=tmp_path)


@pytest.mark.slow
def test_cli_generate_writes_and_verifies_a_candidate(server, tmp_path):
    import os
    import subprocess
    import sys

    server.script(Reply(json={"name": "triton_cli", "source": GOOD.read_text(), "notes": "4 rows per program"}))
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "INFRARSI_LLM_MODEL": "test-model", "OPENAI_API_KEY": "x",
           "INFRARSI_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "infrarsi.cli", "kernels", "generate", "rmsnorm", "--out-dir",
                        str(tmp_path / "gen")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    assert (tmp_path / "gen" / "triton_cli.py").read_text() == GOOD.read_text()
    assert "wrote" in r.stdout and len(server.requests) == 1
    off = subprocess.run([sys.executable, "-m", "infrarsi.cli", "kernels", "generate", "rmsnorm"], capture_output=True,
                         text=True, env={**os.environ, "INFRARSI_LLM": "off"}, timeout=120)
    assert off.returncode == 2 and "no LLM configured" in off.stderr


def _contract_with_kernel_knobs(tmp_path, files: str | None = None):
    from infrarsi.contract.model import load_contract

    contract_file = tmp_path / "c.toml"
    src = (reference_path("rmsnorm").parents[2] / "contracts" / "minigpt-cpu.toml").read_text()
    src = src.replace("adam_impl = [\"foreach\", \"fused\"]\n",
                      "adam_impl = [\"foreach\", \"fused\"]\nkernel_rmsnorm = [\"reference\"]\n"
                      "kernel_cross_entropy = [\"reference\"]\n")
    if files is not None:
        assert 'files = ["kernels/**/*.py"]' in src
        src = src.replace('files = ["kernels/**/*.py"]', f"files = {files}")
    contract_file.write_text(src)
    return load_contract(contract_file)


def test_generated_candidates_join_the_runs_search(server, tmp_path, monkeypatch):
    """With an LLM configured, the run stage asks for the hottest ops in scope; the passing answer joins the
    op's knob domain, the cheating one (host-side gradient scaling) is listed with its reasons and left out.
    Both are written inside the contract's scope (scope.files takes kernels/**/*.py), in the repository."""
    from rich.console import Console

    from infrarsi.adapters import get_adapter
    from infrarsi.contract.scope import glob_of
    from infrarsi.kernels import verdicts
    from infrarsi.kernels.space import hot_ops, model_dims, prepare

    from .conftest import ADVERSARIAL

    repo = tmp_path / "repo"  # the run works from its repository's root (here a bare folder; caches beside it)
    repo.mkdir()
    monkeypatch.chdir(repo)
    contract = _contract_with_kernel_knobs(tmp_path)
    dims = model_dims(contract)
    assert dict(dims)["hidden"] == 256 and dict(dims)["vocab"] == 512
    ranked = hot_ops(["cross_entropy", "rmsnorm"], {}, dims, layers=4)
    assert [o for o, _, _ in ranked] == ["rmsnorm", "cross_entropy"]  # 9 norms of 256 vs one 512-vocab loss
    cheat = (ADVERSARIAL / "ce_host_scale.py").read_text()
    server.script(Reply(json={"name": "triton_gen", "source": GOOD.read_text(), "notes": "4 rows per program"}),
                  Reply(json={"name": "triton_ce_gen", "source": cheat, "notes": "Liger-style"}),
                  Reply(json={"name": "triton_ce_gen", "source": cheat, "notes": "same again"}))
    adapter = get_adapter("minigpt")
    space = adapter.knob_space(contract)
    run_dir = tmp_path / "run"
    err = Console(stderr=True, record=True)
    quick = verify_mod.VerifySettings(families=("odd",), model=dims, determinism_families=())  # + the model's family
    new_space, found, pinned = prepare(space, contract, run_dir, adapter, {}, err, settings=quick,
                                       llm=LLMConfig(base_url=server.base_url, model="test-model"))
    gen = {p: v for p, v in found.items() if v.get("origin") == "generated"}
    assert len(gen) == 2 and len(server.requests) == 3  # rmsnorm once; cross_entropy and its repair
    good = next(p for p, v in gen.items() if v["op"] == "rmsnorm")
    bad = next(p for p, v in gen.items() if v["op"] == "cross_entropy")
    assert gen[good]["verdict"] == "pass" and "of the step" in gen[good]["why"], gen[good]["reasons"]
    assert gen[bad]["verdict"] == "fail" and any(r.startswith("host-op") for r in gen[bad]["reasons"])
    assert good in new_space["kernel_rmsnorm"].domain and bad not in new_space["kernel_cross_entropy"].domain
    assert new_space["kernel_cross_entropy"].domain == ("reference",)
    assert good == "kernels/rmsnorm/generated/triton_gen.py" and (repo / good).read_text() == GOOD.read_text()
    assert bad == "kernels/cross_entropy/generated/triton_ce_gen.py" and (repo / bad).is_file()
    assert glob_of(good, contract.scope.files) and glob_of(bad, contract.scope.files)  # inside the scope
    assert op_of(repo / good) == "rmsnorm" and op_of(repo / bad) == "cross_entropy"
    f = verdicts.verdict_file(run_dir)
    assert f.is_file()
    spec = pinned.launch(contract, new_space.complete({"kernel_rmsnorm": good}))
    assert spec.env[verdicts.ENV] == str(f.resolve()) and f"rmsnorm={good}" in " ".join(spec.argv)


def test_a_scope_without_a_kernels_folder_gets_no_generated_candidates(server, tmp_path, monkeypatch):
    """scope.files takes no kernels/<op>/generated/: generation is refused before the LLM is asked, one line
    per op naming scope.files and the glob to add, and nothing is written."""
    from rich.console import Console

    from infrarsi.adapters import get_adapter
    from infrarsi.kernels.space import generate_for_run

    monkeypatch.chdir(tmp_path)
    contract = _contract_with_kernel_knobs(tmp_path, files='["src/**/*.py"]')
    space = get_adapter("minigpt").knob_space(contract)
    err = Console(stderr=True, record=True, width=400)
    out = generate_for_run(space, contract, tmp_path / "run", {}, err,
                           llm=LLMConfig(base_url=server.base_url, model="test-model"))
    assert out == {} and server.requests == []
    lines = err.export_text().splitlines()
    assert len(lines) == 2 and all("scope.files ['src/**/*.py'] does not take kernels/" in ln for ln in lines)
    assert all('add "kernels/**/*.py" to [scope] files' in ln for ln in lines)
    assert not (tmp_path / "kernels").exists()
