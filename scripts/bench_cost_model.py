"""The step-time model (infrarsi/workloads/simulated/step_time.py, as `infrarsi estimate` uses it) against public
measurements: one row per measurement, its source named in the row, the predicted and the published step time and
the error (predicted / published - 1), then the mean absolute error and the rank order (Spearman) of step time
over the rows.

    .venv/bin/python scripts/bench_cost_model.py            # every row, per source, one node / across nodes
    .venv/bin/python scripts/bench_cost_model.py --rows 1   # the first row only (the test's input)
    .venv/bin/python scripts/bench_cost_model.py --json
    .venv/bin/python scripts/bench_cost_model.py --collectives nccl   # NCCL's ring latency model (not the default)
    .venv/bin/python scripts/bench_cost_model.py --no-small-work-terms   # the landscapes' model, without them
    .venv/bin/python scripts/bench_cost_model.py --torchtitan-kernels fused   # torchtitan's rows before the eager terms

Sources, each cited where its rows are built:
- Megatron-LM's README, "Training Speed and Scalability" table (H100, seq 4096): TFLOP/s per GPU, converted to a
  step time with Megatron's own FLOP count (``model_flops_per_iteration``, the convention that table reports in).
  The model's constants were fitted on these rows: they are in-sample, and the interval `infrarsi estimate` prints
  for the calibrated regime is their spread (infrarsi/estimate/step_model.py).
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023,
  https://arxiv.org/abs/2205.05198): Table 3 (the four models' shapes, TP, PP, GPUs, global and micro batch;
  seq 2048, vocab 51200, A100 80GB, interleaved pipeline of 3 chunks for 175B and 530B) and Table 5 (end-to-end
  iteration seconds with full recompute, and with sequence parallelism + selective recompute, "present work"; no
  data parallelism). The same runs' MFU (41.5 / 51.4 / 56.0 / 56.3%) is Megatron-LM's README table of that time.
  Held out: nothing in the model was fitted on them. Each model's two settings are a landscape of two layouts.
- Megatron-Bridge's performance summary, 25.11 NeMo container, "System: DGX-H100" table
  (https://docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary.html, docs/performance-summary.md of
  github.com/NVIDIA-NeMo/Megatron-Bridge): GPUs, precision, GBS, MBS, sequence length, TP, PP, CP, VP and tokens per
  second per GPU of its dense Megatron rows (Llama 3 70B and 3.1 405B, FP8 current scaling, no FSDP), converted to a
  step time as GBS x sequence / (tokens/s/GPU x GPUs). The shapes are the public Llama 3 configurations; the run
  overlaps TP communication (its recipe, scripts/performance/configs/llama/llama3_llm_pretrain.py, sets H100
  userbuffers) and is priced with the distributed optimizer and overlapped DP communication. Held out.
- torchtitan's docs/performance.md (github.com/pytorch/torchtitan, "Llama 3 performance numbers" and "Llama 2
  performance numbers"): tokens/s per GPU of Llama 3 8B / 70B and Llama 2 13B / 70B with FSDP2 over 64 A100 80GB
  (8 nodes), local batch, activation checkpointing. Sequence length: stated in its text (Llama 2's default 4096,
  "halved compared with Llama 3": 8192; the Llama 3 8B row's 58.2% MFU at 2973 tokens/s checks out at 8192 with
  torchtitan's 6N + 12Lhs FLOPs per token). Read as the job files of the time ran them, which the page does not
  restate: eager (torchtitan's compile default off), bf16 parameters / fp32 reduce, "selective layer" = torchtitan's
  default selective_ac_option "2" (every second block), global batch = local batch x 64. Assumed, not stated: the
  A100 is the 400 W SXM part the simulator's A100 is. Priced through the torchtitan path of the model (FSDP2 per
  block and per micro-batch, op-level selective AC: infrarsi/workloads/simulated/fsdp.py) as eager PyTorch with
  foreach AdamW, torchtitan's default of the time (infrarsi/workloads/simulated/eager.py; ``--torchtitan-kernels
  fused`` prices them without those terms). Held out. The Llama 2 13B rows (no AC, selective layer, selective op) are
  a landscape of three layouts: its Spearman is printed, strict and with layouts measured within MEASURED_TIE of
  each other counted as ties (its two AC rows are 0.5% apart).
  Not rows: torchtitan's benchmarks/llama3_h100_202412_torchtitan.md (H100, 8-512 GPUs). Its H100s ran at a 500 W
  power limit with HBM2e at 2.4 TB/s, and the page says their peak FLOP/s is "between SXM and NVL, and we don't know
  its exact value": no device the model can price; Tables 1, 3, 4 and 5 do not state the sequence length either
  (Tables 2 and 6 do), and every row but two uses torch.compile or Float8, which the model does not price.
Only measurements whose every figure (model shape, layout, GPUs, batch, throughput) the source states are rows.
"""

from __future__ import annotations

import argparse
import json
import statistics

from infrarsi.adapters.megatron.pricing import README_SOURCE, README_TABLE
from infrarsi.estimate.step_model import regime
from infrarsi.workloads import simulated as sim


def readme_rows(collectives: str = "fixed", small_work: bool = True) -> list[dict]:
    """Megatron-LM README rows: GPT (MHA, 4h GeLU MLP, tied embeddings, vocab 131072, seq 4096) on H100; the runs
    use the distributed optimizer, sequence parallelism and overlap DP and TP communication (the README's
    settings; interleaved pipeline of 2 where PP > 1)."""
    out = []
    for size, L, h, heads, tp, pp, gpus, gbs, tflops in README_TABLE:
        m = sim.ModelSpec(num_layers=L, hidden_size=h, num_attention_heads=heads, ffn_hidden_size=4 * h,
                          vocab_size=131072, seq_length=4096, global_batch_size=gbs, swiglu=False,
                          untie_embeddings_and_output_weights=False)
        spec = sim.gpu("H100").model_copy(update={"collective_latency": collectives, "small_work_terms": small_work})
        w = sim.SimWorkload(name=f"gpt-{size}", model=m, gpu="H100", nodes=gpus // 8, gpu_spec=spec)
        s = dict(tensor_parallel=tp, pipeline_parallel=pp, virtual_pipeline=2 if pp > 1 else 1,
                 data_parallel=gpus // (tp * pp), sequence_parallel=tp > 1, tp_comm_overlap=tp > 1,
                 distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)
        full = sim.check_setting(w, s)
        published_s = sim.model_flops_per_iteration(m) / (tflops * 1e12 * gpus)
        predicted_s = sim.simulate(w, full, noise_cv=0).step_time_s
        out.append({"source": f"{README_SOURCE}, row {size}", "gpu": "H100", "gpus": gpus,
                    "layout": f"TP{tp} PP{pp} DP{gpus // (tp * pp)}", "regime": regime(w, full), "fitted_on": True, "landscape": None,
                    "published_s": published_s, "predicted_s": predicted_s, "error": predicted_s / published_s - 1})
    return out


KORTHIKANTI_SOURCE = "Korthikanti et al. 2022, arXiv 2205.05198, Tables 3+5 (A100)"
# (size, heads, hidden, layers, TP, PP, GPUs, global batch, micro batch, virtual pipeline chunks,
#  published seconds per iteration with full recompute, with sequence parallelism + selective recompute)
KORTHIKANTI_TABLE = (
    ("22B", 64, 6144, 48, 8, 1, 8, 4, 4, 1, 1.42, 1.10),
    ("175B", 96, 12288, 96, 8, 8, 64, 64, 1, 3, 18.13, 13.75),
    ("530B", 128, 20480, 105, 8, 35, 280, 280, 1, 3, 49.05, 37.83),
    ("1T", 160, 25600, 128, 8, 64, 512, 512, 1, 1, 94.42, 71.49),
)


def korthikanti_rows(collectives: str = "fixed", small_work: bool = True) -> list[dict]:
    """Korthikanti et al. 2022 rows: GPT-3 style models (MHA, 4h GeLU MLP, tied embeddings, dropout, no flash
    attention: 2022's Megatron), A100 80GB, data parallel 1, no TP communication overlap. Priced on the layout as
    the paper states it (PP 35 and 64 are outside the simulated clusters' knob domain, so the layout is read
    directly rather than through the cluster's scope)."""
    out = []
    spec = sim.gpu("A100").model_copy(update={"collective_latency": collectives, "small_work_terms": small_work})
    for size, heads, h, L, tp, pp, gpus, gbs, mbs, vp, full_s, present_s in KORTHIKANTI_TABLE:
        m = sim.ModelSpec(num_layers=L, hidden_size=h, num_attention_heads=heads, ffn_hidden_size=4 * h,
                          vocab_size=51200, seq_length=2048, global_batch_size=gbs, swiglu=False,
                          untie_embeddings_and_output_weights=False, dropout=True, flash_attention=False)
        w = sim.SimWorkload(name=f"gpt-{size}", model=m, gpu="A100", nodes=gpus // 8, gpu_spec=spec)
        for how, rc, sp, published_s in (("full recompute", "full", False, full_s),
                                         ("SP + selective recompute", "selective", True, present_s)):
            setting = dict(tensor_parallel=tp, pipeline_parallel=pp, virtual_pipeline=vp, data_parallel=1,
                           micro_batch_size=mbs, sequence_parallel=sp, recompute_granularity=rc)
            predicted_s = sim._step_time(w, sim._layout(w, setting))[0]
            out.append({"source": f"{KORTHIKANTI_SOURCE}, {size}, {how}", "gpu": "A100", "gpus": gpus,
                        "layout": f"TP{tp} PP{pp} DP1", "regime": regime(w, setting), "fitted_on": False,
                        "landscape": f"korthikanti-{size}", "published_s": published_s, "predicted_s": predicted_s,
                        "error": predicted_s / published_s - 1})
    return out


def small_work_effect() -> dict[int, float]:
    """Step time with / without the small-work terms, by TP, of a hidden-1024 GPT (24 layers, seq 2048, micro-batch
    1, global batch 64) on one A100 node: where issue 68's held-out check found the model most optimistic."""
    m = sim.ModelSpec(num_layers=24, hidden_size=1024, num_attention_heads=16, ffn_hidden_size=4096, vocab_size=50304,
                      seq_length=2048, global_batch_size=64, swiglu=False)
    out = {}
    for tp in (1, 2, 4, 8):
        s = {"tensor_parallel": tp, "data_parallel": 8 // tp, "sequence_parallel": tp > 1, "micro_batch_size": 1}
        t = [sim.simulate(sim.SimWorkload(name="gpt-1024", model=m, gpu="A100", nodes=1,
                                          gpu_spec=sim.gpu("A100").model_copy(update={"small_work_terms": on})),
                          s, noise_cv=0).step_time_s for on in (True, False)]
        out[tp] = t[0] / t[1]
    return out


BRIDGE_SOURCE = "Megatron-Bridge performance summary, 25.11, DGX-H100 table"
# (model, layers, hidden, heads, query groups, FFN, GPUs, GBS, MBS, TP, PP, CP, VP, published tokens/s/GPU);
# vocab 128256, seq 8192, SwiGLU, untied embeddings; FP8 current scaling (Megatron's "tensorwise" recipe)
BRIDGE_TABLE = (
    ("LLAMA3_70B", 80, 8192, 64, 8, 28672, 64, 128, 1, 4, 8, 1, 5, 1602),
    ("LLAMA3.1_405B", 126, 16384, 128, 8, 53248, 1024, 512, 1, 8, 8, 2, 8, 292),
)


def bridge_rows(collectives: str = "fixed", small_work: bool = True) -> list[dict]:
    """Megatron-Bridge's dense DGX-H100 rows, priced on the stated layout (read directly: 405B's 126 layers do not
    split evenly over PP x VP = 64 chunks, which Megatron handles by uneven stages and the model by fractional
    layers per stage)."""
    out = []
    spec = sim.gpu("H100").model_copy(update={"collective_latency": collectives, "small_work_terms": small_work})
    for name, L, h, heads, groups, ffn, gpus, gbs, mbs, tp, pp, cp, vp, tokens_per_s in BRIDGE_TABLE:
        m = sim.ModelSpec(num_layers=L, hidden_size=h, num_attention_heads=heads, num_query_groups=groups,
                          ffn_hidden_size=ffn, vocab_size=128256, seq_length=8192, global_batch_size=gbs, swiglu=True,
                          untie_embeddings_and_output_weights=True)
        w = sim.SimWorkload(name=name, model=m, gpu="H100", nodes=gpus // 8, gpu_spec=spec)
        dp = gpus // (tp * pp * cp)
        setting = dict(tensor_parallel=tp, pipeline_parallel=pp, context_parallel=cp, virtual_pipeline=vp,
                       data_parallel=dp, micro_batch_size=mbs, sequence_parallel=tp > 1, tp_comm_overlap=tp > 1,
                       fp8_recipe="tensorwise", distributed_optimizer=True, overlap_grad_reduce=True,
                       overlap_param_gather=True, recompute_granularity="none")
        predicted_s = sim._step_time(w, sim._layout(w, setting))[0]
        published_s = gbs * m.seq_length / (tokens_per_s * gpus)
        out.append({"source": f"{BRIDGE_SOURCE}, {name}", "gpu": "H100", "gpus": gpus,
                    "layout": f"TP{tp} PP{pp} CP{cp} DP{dp}", "regime": regime(w, setting), "fitted_on": False,
                    "landscape": None, "published_s": published_s, "predicted_s": predicted_s,
                    "error": predicted_s / published_s - 1})
    return out


TORCHTITAN_SOURCE = "torchtitan docs/performance.md, FSDP2 on 64 A100"
# (model, layers, hidden, heads, query groups, FFN, vocab, seq, local batch, AC mode, selective_ac_option,
#  published tokens/s per GPU); 64 GPUs, FSDP over all of them, global batch = local batch x 64
TORCHTITAN_TABLE = (
    ("Llama 3 8B", 32, 4096, 32, 8, 14336, 128256, 8192, 1, "selective", "2", 2904),
    ("Llama 3 8B", 32, 4096, 32, 8, 14336, 128256, 8192, 1, "selective", "op", 2973),
    ("Llama 3 70B", 80, 8192, 64, 8, 28672, 128256, 8192, 1, "full", "op", 331),
    ("Llama 2 13B", 40, 5120, 40, 40, 13824, 32000, 4096, 2, "none", "op", 2162),
    ("Llama 2 13B", 40, 5120, 40, 40, 13824, 32000, 4096, 2, "selective", "2", 1914),
    ("Llama 2 13B", 40, 5120, 40, 40, 13824, 32000, 4096, 2, "selective", "op", 1904),
    ("Llama 2 70B", 80, 8192, 64, 8, 28672, 32000, 4096, 1, "selective", "op", 355),
    ("Llama 2 70B", 80, 8192, 64, 8, 28672, 32000, 4096, 2, "full", "op", 353),
)


def torchtitan_rows(collectives: str = "fixed", small_work: bool = True, kernels: str = "eager") -> list[dict]:
    """torchtitan's A100 rows, priced as `infrarsi estimate` prices a torchtitan launch (SimWorkload
    dp_sharding "per_block"); a landscape per model (the rows of one model differ in AC and local batch only)."""
    out = []
    spec = sim.gpu("A100").model_copy(update={"collective_latency": collectives, "small_work_terms": small_work})
    gpus = 64
    for name, L, h, heads, groups, ffn, vocab, seq, mbs, ac, option, tokens_per_s in TORCHTITAN_TABLE:
        m = sim.ModelSpec(num_layers=L, hidden_size=h, num_attention_heads=heads, num_query_groups=groups,
                          ffn_hidden_size=ffn, vocab_size=vocab, seq_length=seq, global_batch_size=mbs * gpus)
        w = sim.SimWorkload(name=name, model=m, gpu="A100", nodes=gpus // 8, gpu_spec=spec, dp_sharding="per_block",
                            selective_recompute=option, kernels=kernels, optimizer_implementation="foreach")
        setting = dict(data_parallel=gpus, micro_batch_size=mbs, recompute_granularity=ac)
        predicted_s, phases = sim._step_time(w, sim._layout(w, setting))
        published_s = mbs * seq / tokens_per_s  # one GPU's tokens per step over its tokens per second
        how = ac if ac != "selective" else f"selective {'op' if option == 'op' else 'layer'}"
        row = {"source": f"{TORCHTITAN_SOURCE}, {name}, local batch {mbs}, AC {how}", "gpu": "A100",
               "gpus": gpus, "layout": f"FSDP{gpus} mbs{mbs}", "regime": regime(w, setting), "fitted_on": False,
               "landscape": f"torchtitan-{name}", "published_s": published_s, "predicted_s": predicted_s,
               "error": predicted_s / published_s - 1}
        if kernels == "eager":  # seconds per step of each eager term: against the same rows priced with fused kernels
            fused = sim._step_time(w.model_copy(update={"kernels": "fused"}), sim._layout(w, setting))[1]
            row["eager_terms_s"] = {
                "elementwise": phases["eager_elementwise"] + phases["recompute"] - fused["recompute"],
                "cross_entropy": phases["logits_loss"] - fused["logits_loss"],
                "optimizer": phases["optimizer"] - fused["optimizer"],
                "fsdp_copies": phases["fsdp_copies"], "nccl_sms": phases["nccl_sm_share"]}
        out.append(row)
    return out


# Layouts measured closer than this (relative) are a tie for the landscape's rank order. None of the sources states
# a run-to-run spread (one figure per row); 1% is assumed, half the 2% run-to-run noise the simulated clusters draw.
# The strict rank order is printed beside it.
MEASURED_TIE = 0.01


def summarize(rows: list[dict]) -> dict:
    """Mean / worst |error|, Spearman of step time over ``rows``, and per landscape (rows sharing a model and
    cluster) whether the predicted fastest layout is the measured fastest and what following it costs."""
    errs = [abs(r["error"]) for r in rows]
    out = {"rows": len(rows), "mean_abs_error": statistics.fmean(errs), "max_abs_error": max(errs),
           "spearman_step_time": spearman([r["published_s"] for r in rows], [r["predicted_s"] for r in rows])}
    lands: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("landscape"):
            lands.setdefault(r["landscape"], []).append(r)
    regrets, rank, tied = [], {}, {}
    for name, group in lands.items():
        if len(group) < 2:
            continue
        picked = min(group, key=lambda r: r["predicted_s"])
        regrets.append(picked["published_s"] / min(r["published_s"] for r in group) - 1)
        if len(group) >= 3:  # rank order within a landscape of 3+ layouts of one model on one cluster
            pub, pred = [r["published_s"] for r in group], [r["predicted_s"] for r in group]
            rank[name] = spearman(pub, pred)
            tied[name] = spearman(pub, pred, MEASURED_TIE)
    if regrets:
        out.update({"landscapes": len(regrets), "fastest_found": sum(x == 0 for x in regrets),
                    "median_regret": statistics.median(regrets)})
    if rank:
        out["landscape_spearman"] = rank
        out["landscape_spearman_ties"] = tied
    return out


def _line(sm_: dict, fitted: str, terms: str) -> str:
    sp = sm_["spearman_step_time"]
    line = (f"{sm_['rows']} rows ({fitted}; {terms}): mean |error| {sm_['mean_abs_error']:.1%}, worst "
            f"{sm_['max_abs_error']:.1%}, Spearman of step time {'n/a (< 3 rows)' if sp is None else f'{sp:.2f}'}")
    if "landscapes" in sm_:
        line += (f"; predicted fastest layout is the measured fastest in {sm_['fastest_found']}/{sm_['landscapes']} "
                 f"landscapes, median cost of following it {sm_['median_regret']:.1%}")
    if "landscape_spearman" in sm_:
        line += "; Spearman within a landscape of 3+ layouts: " + ", ".join(
            f"{name} {rho:.2f} ({sm_['landscape_spearman_ties'][name]:.2f} with layouts measured within "
            f"{MEASURED_TIE:.0%} of each other counted as ties)" for name, rho in sm_["landscape_spearman"].items())
    return line


def _ranks(x: list[float], groups: list[list[int]]) -> list[float]:
    """Ranks of ``x`` (0-based), each group of indices given the mean of its members' ranks."""
    order = sorted(range(len(x)), key=x.__getitem__)
    r = [0.0] * len(x)
    for pos, i in enumerate(order):
        r[i] = float(pos)
    for g in groups:
        mean = statistics.fmean(r[i] for i in g)
        for i in g:
            r[i] = mean
    return r


def spearman(a: list[float], b: list[float], tie: float = 0.0) -> float | None:
    """Rank correlation of the measured ``a`` and the predicted ``b``; None under 3 rows. Measurements within
    ``tie`` (relative) of their neighbour in sorted order are one tie: they share their mean rank, and so do their
    predictions (the order the model gives inside a measured tie is not judged). ``tie`` 0: the classic
    Spearman's rho (1 - 6 sum d^2 / (n (n^2 - 1)) without ties)."""
    if len(a) < 3:
        return None
    order = sorted(range(len(a)), key=a.__getitem__)
    groups, cur = [], [order[0]]
    for prev, i in zip(order, order[1:]):
        if a[i] <= a[prev] * (1 + tie):
            cur.append(i)
        else:
            groups.append(cur)
            cur = [i]
    groups.append(cur)
    groups = [g for g in groups if len(g) > 1]
    ra, rb = _ranks(a, groups), _ranks(b, groups)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5 if va and vb else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=None, help="only the first N rows")
    ap.add_argument("--json", action="store_true", help="one JSON object")
    ap.add_argument("--collectives", choices=("fixed", "nccl"), default="fixed",
                    help="collective latency: one constant per collective (the default model) or NCCL's ring model "
                         "(the small-work terms use NCCL's model whatever this says)")
    ap.add_argument("--no-small-work-terms", dest="small_work", action="store_false",
                    help="price without the small-work terms (the benchmark landscapes' model), not as "
                         "`infrarsi estimate` prices a Megatron launch")
    ap.add_argument("--torchtitan-kernels", choices=("eager", "fused"), default="eager",
                    help="price torchtitan's rows with eager PyTorch's kernels (the default, as `infrarsi estimate` "
                         "prices a torchtitan launch: workloads/simulated/eager.py) or with the fused kernels the "
                         "Megatron rows are priced with (the model before the eager terms)")
    a = ap.parse_args(argv)
    if a.rows is not None and a.rows < 1:
        ap.error(f"--rows {a.rows}: give at least 1")
    rows = (readme_rows(a.collectives, a.small_work) + korthikanti_rows(a.collectives, a.small_work)
            + bridge_rows(a.collectives, a.small_work)
            + torchtitan_rows(a.collectives, a.small_work, a.torchtitan_kernels))[: a.rows]
    summary = {"collectives": a.collectives, "small_work_terms": a.small_work,
               "torchtitan_kernels": a.torchtitan_kernels, **summarize(rows)}
    by_source = {name: summarize(part) for name, part in (
        (README_SOURCE, [r for r in rows if r["fitted_on"]]),
        (KORTHIKANTI_SOURCE, [r for r in rows if r["source"].startswith(KORTHIKANTI_SOURCE)]),
        (BRIDGE_SOURCE, [r for r in rows if r["source"].startswith(BRIDGE_SOURCE)]),
        (TORCHTITAN_SOURCE, [r for r in rows if r["source"].startswith(TORCHTITAN_SOURCE)])) if part}
    # Megatron's held-out rows by scope (the targets of issue 68); torchtitan's are their own source line above
    held_out = [r for r in rows if not r["fitted_on"] and not r["source"].startswith(TORCHTITAN_SOURCE)]
    by_scope = {name: summarize(part) for name, part in (
        ("held out, one node", [r for r in held_out if r["gpus"] <= 8]),
        ("held out, across nodes", [r for r in held_out if r["gpus"] > 8])) if part}
    effect = small_work_effect()
    if a.json:
        print(json.dumps({"rows": rows, "summary": summary, "by_source": by_source, "by_scope": by_scope,
                          "small_work_effect_by_tp": effect}))
        return 0
    print(f"{'source':<82} {'layout':<17} {'fitted':<6} {'regime':<18} {'published s':>11} {'predicted s':>11} "
          f"{'error':>7}")
    for r in rows:
        print(f"{r['source']:<82} {r['layout']:<17} {'yes' if r['fitted_on'] else 'no':<6} {r['regime']:<18} "
              f"{r['published_s']:>11.3f} {r['predicted_s']:>11.3f} {r['error']:>+7.1%}")
    terms = "small-work terms on" if a.small_work else f"small-work terms off, collective latency {a.collectives}"
    if a.torchtitan_kernels == "fused":
        terms += ", torchtitan priced with fused kernels"
    for name, sm_ in by_source.items():
        fitted = "fitted on: in-sample" if name == README_SOURCE else "held out: not used for fitting"
        print(f"{name}: {_line(sm_, fitted, terms)}")
    for name, sm_ in by_scope.items():
        print(f"{name}: {_line(sm_, 'held out', terms)}")
    print(f"all: {_line(summary, 'both', terms)}")
    print("the small-work terms on a hidden-1024 GPT, micro-batch 1, one A100 node (with / without): "
          + ", ".join(f"TP {tp} {r:.2f}x" for tp, r in effect.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
