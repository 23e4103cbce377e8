"""The Megatron estimate (adapters/megatron/estimate/peak.py, step.py): megatron-core's own model and step on a fake
process group, per rank, from the launch the adapter emits. The shipped GPU contracts and the micro-batch cap
run with ``-m slow`` (about a minute each on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from infrarsi.contract.model import Contract
from infrarsi.estimate import EstimateError, estimate
from infrarsi.estimate.cli import estimate as estimate_cli
from infrarsi.adapters.megatron.estimate.step import run

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
        "--vocab-size", "128", "--global-batch-size", "16", "--micro-batch-size", "1", "--bf16", "--swiglu",
        "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--disable-bias-linear",
        "--attention-dropout", "0.0", "--hidden-dropout", "0.0"]


def cli(args: list[str]):
    """``infrarsi estimate ARGS``."""
    app = typer.Typer()
    app.command()(estimate_cli)
    return CliRunner().invoke(app, args)


def test_cli_prints_each_pipeline_stages_peak_for_the_cpu_contract():
    res = cli([str(ROOT / "contracts/megatron-cpu.toml"), "--json", "--set",
                                   "tensor_parallel=1", "--set", "pipeline_parallel=2", "--set", "data_parallel=1",
                                   "--set", "sequence_parallel=false"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output.strip().splitlines()[-1])
    assert d["framework"] == "megatron" and d["layout"]["pp"] == 2 and d["layout"]["dp"] == 1
    first, last = d["per_rank"]
    assert (first["why"], last["why"]) == ("first pipeline stage", "last pipeline stage")
    assert first["layers"] == last["layers"] == 3
    # the last stage holds the output layer's logits (vocabulary 16384) and the loss: more activations
    assert last["tracked"]["Activation"] > first["tracked"]["Activation"]
    assert d["peak_bytes"] == max(first["peak_bytes"], last["peak_bytes"]) and d["fits"] is True


def test_a_setting_megatron_core_refuses_is_refused_not_estimated(tmp_path):
    c = Contract.model_validate({
        "name": "refused", "workload": {"adapter": "megatron", "launch": str(ROOT / "contracts/megatron-cpu/train.sh"),
                                        "script_env": {"NPROC": "3"}},
        "hardware": {"kind": "cpu", "devices": 3, "memory_capacity_gib": 2.0},
        "scope": {"knobs": {"tensor_parallel": [1, 3], "data_parallel": [1, 3]}}})
    with pytest.raises(EstimateError, match="num_attention_heads \\(4\\) must be a multiple"):
        estimate(c, {"tensor_parallel": 3, "data_parallel": 1})


@pytest.mark.slow
@pytest.mark.parametrize("extra,world", [
    ([], 2),  # no pipelining: 2 of 8 micro-batches
    (["--pipeline-model-parallel-size", "2"], 2),  # 1F1B: PP + 1 = 3 of 16
    (["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"], 2),  # 2 PP = 4 of 16
])
def test_the_capped_micro_batches_reach_the_full_steps_peak(extra, world):
    capped = run({"argv": TINY + extra, "world": world, "ranks": "auto"})
    full = run({"argv": TINY + extra, "world": world, "ranks": "auto", "all_micro_batches": True})
    for a, b in zip(capped["ranks"], full["ranks"]):
        assert a["micro_batches_run"] < b["micro_batches_run"] == b["micro_batches"]
        # equal but for the loss scalars each micro-batch reports (4 bytes each, kept until the step ends)
        assert a["peak"].keys() == b["peak"].keys()
        assert all(abs(a["peak"][k] - b["peak"][k]) <= 64 * 4 for k in a["peak"]), (a["rank"], a["peak"], b["peak"])


@pytest.mark.slow
@pytest.mark.parametrize("name,sets,want", [
    ("megatron-llama3-70b-h100x64.toml", ["tensor_parallel=8", "data_parallel=2"], {"tp": 8, "pp": 4, "dp": 2}),
    ("megatron-deepseek-v2-lite-h100x64.toml", ["expert_parallel=16"], {"ep": 16, "dp": 64}),
])
def test_cli_estimates_the_shipped_gpu_contracts_per_rank(name, sets, want):
    args = [str(ROOT / "contracts" / name), "--json"]
    for s in sets:
        args += ["--set", s]
    res = cli(args)
    assert res.exit_code == 0, res.output
    d = json.loads(res.output.strip().splitlines()[-1])
    assert {k: d["layout"][k] for k in want} == want and d["world_size"] == 64
    assert d["per_rank"] and all(r["peak_bytes"] > 10 * 2**30 for r in d["per_rank"])  # tens of GiB per H100 rank
    if "ep" in want:  # 64 experts over EP 16 in each of the 26 MoE layers
        assert d["per_rank"][0]["local_experts"] == 26 * 64 // 16 and "most experts" in d["per_rank"][0]["why"]


def test_the_ranks_estimated_are_the_first_and_last_stage_and_the_one_with_the_most_experts():
    from infrarsi.adapters.megatron.estimate.step import auto_ranks
    from infrarsi.adapters.megatron.cpu.model import parse

    args = parse(TINY + ["--pipeline-model-parallel-size", "4", "--num-layers", "8", "--num-experts", "4",
                         "--moe-layer-freq", "([0]*3+[1]*5)"], strict=True).args
    stages = [{"layers": 2, "moe_layers": m} for m in (0, 1, 2, 2)]  # stage 0 dense, stage 1 mixed
    assert auto_ranks(args, 16, stages) == {0: ["first pipeline stage"], 12: ["last pipeline stage"],
                                            8: ["most experts"]}  # the first of the stages with 2 MoE layers
    dense = parse(TINY, strict=True).args
    assert auto_ranks(dense, 2, [{"layers": 4, "moe_layers": 0}]) == {0: ["first pipeline stage",
                                                                          "last pipeline stage"]}


def _cpu_contract(tmp_path: Path, extra: str, *, moe: bool = False, knobs: dict | None = None) -> Contract:
    src = ROOT / ("contracts/megatron-cpu/train_moe.sh" if moe else "contracts/megatron-cpu/train.sh")
    script = tmp_path / "train.sh"
    script.write_text(src.read_text().replace("--use-cpu-initialization", f"--use-cpu-initialization {extra}"))
    return Contract.model_validate({"name": "t", "workload": {"adapter": "megatron", "launch": str(script)},
                                    "hardware": {"kind": "cpu", "devices": 2, "memory_capacity_gib": 2.0},
                                    "scope": {"knobs": knobs or {}}})


def test_what_the_cpu_launcher_refuses_is_refused_by_the_estimate_and_the_trial(tmp_path):
    from infrarsi.adapters.base import FrameworkRejected
    from infrarsi.adapters.megatron import MegatronAdapter

    _cpu_contract(tmp_path, "--fp8-format hybrid")  # Transformer Engine only: not "fits" at bf16
    toml = tmp_path / "fp8.toml"
    toml.write_text('name = "fp8"\n[workload]\nadapter = "megatron"\nlaunch = "train.sh"\n'
                    '[hardware]\nkind = "cpu"\ndevices = 2\nmemory_capacity_gib = 2.0\n')
    res = cli([str(toml)])
    assert res.exit_code != 0 and "fits" not in res.output
    assert "CPU launcher refuses this setting: --fp8-format needs Transformer" in " ".join(res.output.split())
    # the alltoall dispatcher with expert TP 2 gathers uneven token counts, which gloo refuses
    a2a = _cpu_contract(tmp_path, "--tensor-model-parallel-size 2", moe=True,
                        knobs={"expert_parallel": [1, 2], "tensor_parallel": [1, 2], "data_parallel": [1, 2]})
    setting = {"expert_parallel": 1, "tensor_parallel": 2, "data_parallel": 1}
    with pytest.raises(EstimateError, match="alltoall with expert tensor parallelism 2 gathers uneven"):
        estimate(a2a, setting)
    ad = MegatronAdapter()
    with pytest.raises(FrameworkRejected, match="alltoall with expert tensor parallelism 2"):
        ad.trial_form(a2a, ad.launch(a2a, setting), setting)  # the CPU launcher's word, as the runner asks it
    ok = {**setting, "moe_token_dispatcher": "allgather"}
    ad.trial_form(a2a, ad.launch(a2a, ok), ok)  # runs on gloo


def test_the_context_parallel_refusal_suggests_what_the_contract_allows(tmp_path):
    gpu = Contract.model_validate({
        "name": "cp", "workload": {"adapter": "megatron", "launch": str(tmp_path / "job.sh")},
        "hardware": {"kind": "H100-80GB", "devices": 8, "memory_capacity_gib": 80},
        "scope": {"knobs": {"micro_batch_size": [1, 2]}}})
    (tmp_path / "job.sh").write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py " + " ".join(TINY) + " --context-parallel-size 2\n")
    with pytest.raises(EstimateError) as e:
        estimate(gpu, {})
    assert "--set context_parallel" not in str(e.value) and "not a knob of this contract" in str(e.value)
    cp_knob = gpu.model_copy(update={"scope": gpu.scope.model_copy(update={"knobs": {"context_parallel": [1, 2]}})})
    with pytest.raises(EstimateError, match="estimate with --set context_parallel=1"):
        estimate(cp_knob, {"context_parallel": 2})


def test_a_world_size_that_does_not_divide_names_the_product_and_what_divides():
    from infrarsi.adapters.megatron.check import megatron_parallel_check

    msg, = megatron_parallel_check({"tensor_parallel": 8, "pipeline_parallel": 2}, world_size=24)
    assert "is not divisible by 16 (TP 8 x PP 2 x CP 1)" in msg and "TP 1, 2, 3, 4, 6 or 12; PP 1 or 3" in msg


@pytest.mark.slow  # the default run's test_cli_prints_each_pipeline_stages_peak_for_the_cpu_contract covers one process
def test_two_step_processes_side_by_side_give_the_one_process_result():
    from infrarsi.adapters.megatron.estimate.peak import run_step, start_steps

    job = {"argv": TINY + ["--pipeline-model-parallel-size", "2"], "world": 2, "ranks": "auto"}
    lines: list[str] = []
    two = run_step(job, started=start_steps(side_by_side=True), progress=lines.append)
    one = run_step(job, started=start_steps(side_by_side=False))
    assert [r["rank"] for r in two["ranks"]] == [r["rank"] for r in one["ranks"]] == [0, 1]
    assert [r["peak"] for r in two["ranks"]] == [r["peak"] for r in one["ranks"]]
    assert [r["why"] for r in two["ranks"]] == [r["why"] for r in one["ranks"]]
    assert any(ln.startswith("rank 1: done") for ln in lines)
