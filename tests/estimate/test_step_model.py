"""`infrarsi estimate`'s predicted step time (the simulated clusters' cost model on the contract's model and
cluster): an interval from the model's own error on Megatron-LM's README table, the N fastest layouts of the scope
that fit, and refusals that say why."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import infrarsi.workloads.simulated as sim
from infrarsi.adapters.megatron.pricing import README_TABLE
from infrarsi.adapters.workload import Workload
from infrarsi.cli import _register_tools, app
from infrarsi.estimate import EstimateError
from infrarsi.estimate import step_model as sm
from infrarsi.estimate.cli import _setting

ROOT = Path(__file__).resolve().parents[2]
SIM8B = ROOT / "contracts/sim-dense8b-h100x8.toml"
MEGATRON70B = ROOT / "contracts/megatron-llama3-70b-h100x64.toml"


def _estimate(*args):
    _register_tools()
    return CliRunner().invoke(app, ["estimate", *map(str, args)])


def _loaded(path, **sets):
    wl = Workload.of_file(path)
    space = wl.knob_space()
    s = space.complete({**_setting(wl.contract, wl.adapter, space, []), **sets})
    return wl, space, sm.launch_setting(wl, s.to_dict())


def test_the_calibrated_band_is_the_models_error_on_the_readme_table():
    ratios = []
    for _size, L, h, heads, tp, pp, gpus, gbs, published in README_TABLE:
        m = sim.ModelSpec(num_layers=L, hidden_size=h, num_attention_heads=heads, ffn_hidden_size=4 * h,
                          vocab_size=131072, seq_length=4096, global_batch_size=gbs, swiglu=False,
                          untie_embeddings_and_output_weights=False)
        w = sim.SimWorkload(name=f"gpt-{L}x{h}", model=m, gpu="H100", nodes=gpus // 8,
                            gpu_spec=sm.estimate_spec("H100"))  # as the estimate prices a Megatron launch
        s = dict(tensor_parallel=tp, pipeline_parallel=pp, virtual_pipeline=2 if pp > 1 else 1,
                 data_parallel=gpus // (tp * pp), sequence_parallel=tp > 1, tp_comm_overlap=tp > 1,
                 distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)
        r = sim.simulate(w, s, noise_cv=0)
        ratios.append(r.tflops_per_gpu / published)  # measured / predicted step time
        assert sm.regime(w, sim.check_setting(w, s)) == "calibrated"  # the rows define the calibrated regime
    assert sm.INTERVALS["calibrated"] == (round(min(ratios), 3), round(max(ratios), 3))


@pytest.mark.parametrize("sets, regime, hi", [({}, "calibrated", 1.065),
                                              ({"tensor_parallel": 8, "data_parallel": 1}, "small work per GPU", 3.0)])
def test_the_interval_contains_the_point_and_widens_where_work_per_gpu_is_small(sets, regime, hi):
    wl, _, s = _loaded(SIM8B, **sets)
    p = sm.predict(sm.cost_workload(wl), s, sm.capacity_bytes(wl))
    assert p.regime == regime and p.low_s < p.step_time_s < p.high_s
    assert p.high_s == pytest.approx(p.step_time_s * hi)
    # the simulated contract's trials print this same noise-free step time
    assert p.step_time_s == pytest.approx(sim.simulate(sm.cost_workload(wl), s, noise_cv=0).step_time_s, rel=1e-9)


def test_the_fastest_layouts_are_ordered_fit_and_start_at_the_scopes_exhaustive_optimum():
    wl, space, s = _loaded(SIM8B)
    w = sm.cost_workload(wl)
    r = sm.fastest(w, space, s, sm.capacity_bytes(wl), 5)
    times = [p.step_time_s for p in r.fastest]
    assert len(times) == 5 and times == sorted(times)
    assert all(p.fits and p.memory_bytes <= sm.capacity_bytes(wl) for p in r.fastest)
    assert r.out_of_memory > 0 and r.considered > r.out_of_memory + 5
    best = sim.exhaustive_optimum(w, space)
    assert times[0] == pytest.approx(best.step_time_s, rel=1e-9)
    base = sm.predict(w, s, sm.capacity_bytes(wl))
    assert times[0] < base.step_time_s  # the baseline (full recompute, no overlap) is not the fastest


def test_cli_fastest_json_lists_time_interval_and_memory_per_layout():
    r = _estimate(SIM8B, "--fastest", 3, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["prediction"]["fits"] and out["prediction_refused"] is None
    rk = out["ranking"]
    assert len(rk["fastest"]) == 3 and rk["unpriced_count"] == 0
    for p in rk["fastest"]:
        assert p["low_s"] <= p["step_time_s"] <= p["high_s"] and p["memory_bytes"] <= p["capacity_bytes"]
        assert set(p) >= {"setting", "regime", "interval_source", "phases", "fits"}
    text = _estimate(SIM8B, "--fastest", 3)
    assert text.exit_code == 0 and "3 fastest of" in text.stdout and "interval" in text.stdout, text.output


def test_a_megatron_launch_is_priced_with_its_own_flags_and_names_what_the_model_does_not_read():
    r = _estimate(MEGATRON70B, "--fastest", 2, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    pred = out["prediction"]
    assert pred["setting"]["overlap_grad_reduce"] is True  # the launch's --overlap-grad-reduce, outside the scope
    assert any("nccl_algo" in n for n in pred["notes"])
    fast = out["ranking"]["fastest"]
    assert len(fast) == 2 and fast[0]["step_time_s"] <= fast[1]["step_time_s"]
    wl, space, s = _loaded(MEGATRON70B)
    w = sm.cost_workload(wl)
    assert (w.world_size, w.model.num_layers, w.model.hidden_size, w.spec.name) == (64, 80, 8192, "H100")


def test_a_layout_the_model_cannot_price_says_why():
    wl, _, s = _loaded(MEGATRON70B)
    with pytest.raises(EstimateError, match="recompute_num_layers=1 < 20 layers per chunk"):
        sm.predict(sm.cost_workload(wl), {**s, "recompute_granularity": "full", "recompute_method": "block"},
                   sm.capacity_bytes(wl))
    # in a ranking, the layouts it cannot price are counted and listed with the reason, the others ranked
    rk = sm.fastest(sm.cost_workload(wl), wl.knob_space(), {**s, "recompute_method": "block"}, sm.capacity_bytes(wl), 3)
    assert rk.unpriced_count > 0 and len(rk.fastest) == 3
    assert all(u["setting"]["recompute_granularity"] == "full" and "recompute_method=block" in u["reason"]
               for u in rk.unpriced)
    assert all(p.setting["recompute_granularity"] != "full" for p in rk.fastest)
    r = _estimate(ROOT / "contracts/megatron-deepseek-v2-lite-h100x64.toml", "--fastest", 2)
    assert r.exit_code == 1 and "multi-latent attention" in r.stderr, r.output
    r = _estimate(ROOT / "contracts/torchtitan-cpu.toml", "--fastest", 2)
    assert r.exit_code == 1 and "hardware.kind = 'cpu'" in r.stderr, r.output
    assert _estimate(SIM8B, "--fastest", 0).exit_code == 2


def test_the_unread_note_names_only_the_knobs_the_model_does_not_read():
    assert sm.unread_note({"tensor_parallel": 2, "micro_batch_size": 1}) is None
    assert sm.unread_note({"tensor_parallel": 2, "nccl_algo": "ring", "cuda_graph": True}) == (
        "not in the step-time model (priced as at Megatron's defaults): cuda_graph, nccl_algo")
