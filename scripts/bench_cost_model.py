"""The step-time model (infrarsi/workloads/simulated/step_time.py, as `infrarsi estimate` uses it) against public
measurements: one row per measurement, its source named in the row, the predicted and the published step time and
the error (predicted / published - 1), then the mean absolute error and the rank order (Spearman) of step time
over the rows.

    .venv/bin/python scripts/bench_cost_model.py            # every row
    .venv/bin/python scripts/bench_cost_model.py --rows 1   # the first row only (the test's input)
    .venv/bin/python scripts/bench_cost_model.py --json
    .venv/bin/python scripts/bench_cost_model.py --collectives nccl   # NCCL's ring latency model (not the default)
    .venv/bin/python scripts/bench_cost_model.py --no-small-work-terms   # the landscapes' model, without them

Sources, each cited where its rows are built:
- Megatron-LM's README, "Training Speed and Scalability" table (H100, seq 4096): TFLOP/s per GPU, converted to a
  step time with Megatron's own FLOP count (``model_flops_per_iteration``, the convention that table reports in).
  The model's constants were fitted on these rows: they are in-sample, and the interval `infrarsi estimate` prints
  for the calibrated regime is their spread (infrarsi/estimate/step_model.py).
Only measurements whose every figure (model shape, layout, GPUs, batch, throughput) the source states are rows.
"""

from __future__ import annotations

import argparse
import json
import statistics

from infrarsi.estimate.step_model import README_SOURCE, README_TABLE, regime
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
                    "layout": f"TP{tp} PP{pp} DP{gpus // (tp * pp)}", "regime": regime(w, full), "fitted_on": True,
                    "published_s": published_s, "predicted_s": predicted_s, "error": predicted_s / published_s - 1})
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    """Rank correlation (no ties expected); None under 3 rows."""
    if len(a) < 3:
        return None
    ra = {i: r for r, i in enumerate(sorted(range(len(a)), key=a.__getitem__))}
    rb = {i: r for r, i in enumerate(sorted(range(len(b)), key=b.__getitem__))}
    n = len(a)
    return 1 - 6 * sum((ra[i] - rb[i]) ** 2 for i in range(n)) / (n * (n * n - 1))


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
    a = ap.parse_args(argv)
    if a.rows is not None and a.rows < 1:
        ap.error(f"--rows {a.rows}: give at least 1")
    rows = readme_rows(a.collectives, a.small_work)[: a.rows]
    errs = [abs(r["error"]) for r in rows]
    summary = {"collectives": a.collectives, "small_work_terms": a.small_work, "rows": len(rows), "mean_abs_error": statistics.fmean(errs), "max_abs_error": max(errs),
               "spearman_step_time": spearman([r["published_s"] for r in rows], [r["predicted_s"] for r in rows])}
    if a.json:
        print(json.dumps({"rows": rows, "summary": summary}))
        return 0
    print(f"{'source':<78} {'layout':<14} {'regime':<19} {'published s':>11} {'predicted s':>11} {'error':>7}")
    for r in rows:
        print(f"{r['source']:<78} {r['layout']:<14} {r['regime']:<19} {r['published_s']:>11.3f} "
              f"{r['predicted_s']:>11.3f} {r['error']:>+7.1%}")
    sp = summary["spearman_step_time"]
    terms = "small-work terms on" if a.small_work else f"small-work terms off, collective latency {a.collectives}"
    print(f"{len(rows)} rows (fitted on: in-sample; {terms}): mean |error| {summary['mean_abs_error']:.1%}, worst "
          f"{summary['max_abs_error']:.1%}, Spearman of step time {'n/a (< 3 rows)' if sp is None else f'{sp:.2f}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
