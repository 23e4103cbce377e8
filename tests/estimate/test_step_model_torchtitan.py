"""`infrarsi estimate`'s predicted step time for a torchtitan GPU launch: the same cost model, with torchtitan's FSDP2
per block and per micro-batch, HSDP and selective activation checkpointing (op or every n-th block), read from the
job file as trials read it."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infrarsi.adapters.workload import Workload
from infrarsi.cli import _register_tools, app
from infrarsi.estimate import step_model as sm
from infrarsi.workloads.simulated import fsdp
from infrarsi.workloads.simulated.layout import param_counts

ROOT = Path(__file__).resolve().parents[2]
TT8B = ROOT / "contracts/llama3-8b-h100x64.toml"


def _predict(path=TT8B, **sets):
    """The launch's own setting (local batch 2, FSDP over 64, selective op AC) with ``sets`` over it, priced."""
    wl = Workload.of_file(path)
    w = sm.cost_workload(wl)
    return w, sm.predict(w, sm.launch_setting(wl, sets), sm.capacity_bytes(wl))


def test_estimate_prints_a_predicted_step_time_for_a_torchtitan_gpu_contract():
    _register_tools()
    r = CliRunner().invoke(app, ["estimate", str(TT8B), "--fastest", "3", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    p = out["prediction"]
    assert out["prediction_refused"] is None and p["regime"] == "torchtitan"
    assert 0 < p["low_s"] < p["step_time_s"] < p["high_s"]
    assert p["high_s"] == pytest.approx(p["step_time_s"] * sm.INTERVALS["torchtitan"][1])
    assert {"dp_grad_sync", "dp_param_gather", "recompute"} <= set(p["phases"])
    times = [x["step_time_s"] for x in out["ranking"]["fastest"]]
    assert len(times) == 3 and times == sorted(times)
    text = CliRunner().invoke(app, ["estimate", str(TT8B), "--fastest", "1"])
    assert text.exit_code == 0 and "predicted step time: " in text.output and "torchtitan" in text.output


def test_the_job_files_fields_are_what_is_priced():
    w, p = _predict()
    assert (w.dp_sharding, w.selective_recompute, w.nodes) == ("per_block", "op", 8)  # the job file: op, 64 GPUs
    assert (w.model.num_layers, w.model.hidden_size, w.model.seq_length) == (32, 4096, 8192)  # the 8B flavour
    assert w.model.swiglu and w.model.untie_embeddings_and_output_weights
    # local batch 2 x FSDP 64 = the job's derived global batch 128: one micro-batch per step
    assert w.model.global_batch_size == 128 and p.setting["micro_batch_size"] == 2
    assert sm.unread_note(p.setting, "per_block").startswith("not in the step-time model (priced as at their "
                                                               "defaults: eager")
    assert "data_parallel_replicate" not in sm.unread_knobs(p.setting, "per_block")
    # eager PyTorch (the job does not compile), AdamW at torchtitan's default implementation; the note says so
    assert (w.kernels, w.optimizer_implementation) == ("eager", "fused")
    eager_note, unread = sm.prediction_notes(p.setting, w)
    assert eager_note.startswith("priced as eager PyTorch") and "fused AdamW" in eager_note
    assert unread == sm.unread_note(p.setting, "per_block")
    assert {"eager_elementwise", "fsdp_copies", "nccl_sm_share"} <= set(p.phases)


def test_more_activation_checkpointing_is_slower_and_keeps_less():
    none, op, full = (_predict(recompute_granularity=rc)[1] for rc in ("none", "selective", "full"))
    assert none.step_time_s < op.step_time_s < full.step_time_s
    assert none.memory_bytes > op.memory_bytes > full.memory_bytes
    assert none.phases["recompute"] == 0 < op.phases["recompute"] < full.phases["recompute"]


def test_layer_level_selective_ac_recomputes_every_nth_block():
    wl = Workload.of_file(TT8B)
    base = sm.cost_workload(wl)
    s = sm.launch_setting(wl, {})
    none, full = (sm.predict(base, {**s, "recompute_granularity": rc}, 1e12).step_time_s for rc in ("none", "full"))
    for n in (1, 2, 4):
        w = base.model_copy(update={"selective_recompute": str(n)})
        t = sm.predict(w, s, 1e12).step_time_s
        assert t == pytest.approx(full / n + none * (1 - 1 / n), rel=1e-6)


def test_larger_tp_on_one_node_costs_more_communication_for_8b():
    preds = [_predict(tensor_parallel=tp, data_parallel=64 // tp, sequence_parallel=tp > 1)[1] for tp in (1, 2, 4, 8)]
    tp_comm = [p.phases["tp_comm"] for p in preds]
    assert tp_comm[0] == 0 < tp_comm[1] < tp_comm[2] < tp_comm[3]
    times = [p.step_time_s for p in preds]
    assert times == sorted(times) and times[-1] > 1.3 * times[0]


def test_hsdp_inside_a_node_gathers_faster_than_fsdp_across_nodes():
    fsdp64 = _predict(recompute_granularity="full")[1]
    hsdp = _predict(recompute_granularity="full", data_parallel_replicate=8)[1]  # shard 8 over NVLink, 8 replicas
    assert hsdp.phases["dp_param_gather"] < fsdp64.phases["dp_param_gather"]
    assert hsdp.memory_bytes > fsdp64.memory_bytes  # optimizer state sharded 8 ways, not 64


def test_fsdp_collectives_are_exposed_only_beyond_the_compute_beside_them():
    kw = dict(layers=32, first_gather_s=0.01, last_gather_s=0.0, first_reduce_s=0.0, last_reduce_s=0.02)
    hidden = fsdp.exposed_per_microbatch(gather_s=1.0, reduce_s=2.0, fwd_s=5.0, bwd_s=10.0, reshard=True, **kw)
    assert hidden == pytest.approx((0.01 + 1.0, 2.0 + 0.02))  # the first gather, the last reduces
    slow = fsdp.exposed_per_microbatch(gather_s=1.0, reduce_s=2.0, fwd_s=0.5, bwd_s=1.0, reshard=True, **kw)
    assert slow == pytest.approx((0.01 + 1.0 + 31 * 0.5, 31 * 2.0 + 2.0 + 0.02))
    kept = fsdp.exposed_per_microbatch(gather_s=1.0, reduce_s=2.0, fwd_s=0.5, bwd_s=1.0, reshard=False, **kw)
    assert kept[1] == pytest.approx(31 * 1.0 + 2.0 + 0.02)  # no gather again in backward


def test_a_torchtitan_job_the_model_cannot_price_says_why(tmp_path):
    job = (ROOT / "contracts/jobs/llama3_8b.toml").read_text().replace('selective_ac_option = "op"',
                                                                        'selective_ac_option = "every other"')
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs/llama3_8b.toml").write_text(job)
    (tmp_path / "c.toml").write_text(TT8B.read_text())
    wl = Workload.of_file(tmp_path / "c.toml")
    with pytest.raises(sm.EstimateError, match="selective_ac_option = 'every other': use 'op' or a positive"):
        sm.cost_workload(wl)


def test_the_jobs_adamw_implementation_is_priced(tmp_path):
    (tmp_path / "jobs").mkdir()
    job = (TT8B.parent / "jobs/llama3_8b.toml").read_text()
    (tmp_path / "jobs/llama3_8b.toml").write_text(job.replace('name = "AdamW"', 'name = "AdamW"\nimplementation = "foreach"'))
    (tmp_path / "c.toml").write_text(TT8B.read_text())
    w, p = _predict(tmp_path / "c.toml")
    base_w, base = _predict()
    assert (w.optimizer_implementation, base_w.optimizer_implementation) == ("foreach", "fused")
    # foreach AdamW moves 84 - 28 = 56 bytes more per parameter of the fp32 shard (all parameters / 64 GPUs) than the
    # fused kernel, at 88% of the H100's 3.35e12 B/s; nothing else changes
    shard = param_counts(w.model)["total"] / 64
    added = p.phases["optimizer"] - base.phases["optimizer"]
    assert added == pytest.approx(shard * 56 / (3.35e12 * 0.88))
    assert p.step_time_s - base.step_time_s == pytest.approx(added)


@pytest.mark.parametrize("name", ["llama3-8b-h100x64.toml", "llama3-70b-h100x256.toml"])
def test_the_gpu_contracts_list_every_tp_of_their_scope_on_the_device_the_model_prices(name):
    from infrarsi.workloads.simulated import gpu

    wl = Workload.of_file(ROOT / "contracts" / name)
    w = sm.cost_workload(wl)
    hw = wl.contract.hardware
    # the contract names the 700 W H100 SXM 80GB: the spec the model prices, its capacity what torch reports of it
    assert gpu(hw.kind) == gpu("H100") and w.spec.name == "H100" and hw.memory_capacity_gib == 79.6
    ranking = sm.fastest(w, wl.knob_space(), sm.launch_setting(wl, {}), sm.capacity_bytes(wl), 200)
    # data_parallel in scope: each TP of the scope has its layout (TP x DP = the devices), sequence parallel with TP
    pairs = {(p.setting["tensor_parallel"], p.setting["data_parallel"]) for p in ranking.fastest}
    assert pairs == {(tp, hw.devices // tp) for tp in (1, 2, 4, 8)}
    assert all(p.setting["sequence_parallel"] == (p.setting["tensor_parallel"] > 1) for p in ranking.fastest)
