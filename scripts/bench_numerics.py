"""The loss referee on real minigpt training: how far each knob and each defective patch moves the loss and
the gradient norm, against the bands the doctor's calibration gives.

Every row is a real training run (its own process; data parallel through torchrun on gloo). The referee is
calibrated as the doctor does it (infrarsi.contract.numerics.calibrate with the contract defaults): the first
baseline run is the reference, a same-seed repeat gives the repeat spread, a seed + 1 run the seed spread.
"worst" is the largest ratio of a step's relative difference to its tolerance over the window (> 1 fails).

    nice python scripts/bench_numerics.py [--steps 10] [--size tiny|contract]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infrarsi.adapters.megatron.log import parse_log, to_metrics  # noqa: E402
from infrarsi.contract.model import Loss  # noqa: E402
from infrarsi.contract.numerics import Calibration, calibrate  # noqa: E402

P = ROOT / "tests/numerics/patches"
SIZES = {
    "tiny": ["--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
             "--vocab-size", "128", "--global-batch-size", "16"],
    "contract": ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8", "--seq-length", "256",
                 "--vocab-size", "512", "--global-batch-size", "16"],
}
HONEST = [
    ("micro-batch 4 (same global batch)", ["--micro-batch-size", "4"], 1, False),
    ("micro-batch 8", ["--micro-batch-size", "8"], 1, False),
    ("full recompute", ["--recompute-granularity", "full"], 1, False),
    ("selective recompute", ["--recompute-granularity", "selective"], 1, False),
    ("SDPA attention", ["--attention-backend", "auto"], 1, False),
    ("fused Adam", ["--adam-impl", "fused"], 1, False),
    ("2 threads", ["--intra-op-threads", "2"], 1, False),
    ("data parallel 2", [], 2, False),
    ("Triton RMSNorm kernel (interpreted)", ["--kernel", f"rmsnorm={ROOT / 'kernels/rmsnorm/triton_rows.py'}@rows16"], 1, False),
    ("bf16", ["--bf16"], 1, True),
]
DEFECTIVE = [
    ("patch: halved loss", ["--kernel", f"cross_entropy={P / 'cross_entropy_half.py'}"], 1, False),
    ("patch: layer 0 MLP backward skipped", ["--kernel", f"swiglu={P / 'swiglu_skip_layer_backward.py'}"], 1, False),
    ("patch: gradient all-reduce dropped", ["--kernel", f"rmsnorm={P / 'rmsnorm_drops_grad_allreduce.py'}"], 2, False),
    ("patch: layer backward skipped, bf16", ["--bf16", "--kernel", f"swiglu={P / 'swiglu_skip_layer_backward.py'}"], 1, True),
]


def train(base: list[str], extra: list[str], dp: int = 1, seed: int = 1234):
    module = ["-m", "infrarsi.workloads.minigpt"]
    cmd = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(dp), *module]
           if dp > 1 else [sys.executable, *module])
    argv = [*base, "--seed", str(seed), "--log-interval", "1", *extra]
    if "--micro-batch-size" not in extra:
        argv += ["--micro-batch-size", "2"]
    if "--intra-op-threads" not in extra:
        argv += ["--intra-op-threads", "1"]
    r = subprocess.run(cmd + argv, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if r.returncode:
        raise SystemExit(f"{' '.join(extra)}: exit {r.returncode}: {r.stderr[-500:]}")
    return to_metrics(parse_log(r.stdout), warmup_steps=2, measured_steps=4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", choices=tuple(SIZES), default="tiny")
    args = ap.parse_args(argv)
    base = [*SIZES[args.size], "--train-iters", str(args.steps), "--lr", "1e-3"]
    d = Loss()
    cal = Calibration(exact_rtol=d.exact_rtol, spread_factor=d.spread_factor, precision_fraction=d.precision_fraction,
                      rtol=d.rtol)
    ref_run = train(base, [])
    ref = calibrate([ref_run, train(base, [])], [train(base, [], seed=1235)], window=args.steps, cal=cal,
                    precision_knobs=["bf16"], baseline={"bf16": False})
    print(f"minigpt {args.size}, {args.steps}-step window; {ref.basis}")
    for name in ("loss", "grad_norm"):
        print(f"  {name}: exact tolerance {max(ref.exact[name]):.3g}, precision band "
              f"{min(ref.precision[name]):.3g}..{max(ref.precision[name]):.3g}, seed spread up to "
              f"{max(ref.seed_spread[name]):.3g}")
    print(f"\n{'run':<40s} {'band':>9s} {'loss rel':>9s} {'gnorm rel':>9s} {'worst':>8s}  verdict")
    wrong = 0
    for rows, expect_ok in ((HONEST, True), (DEFECTIVE, False)):
        for name, extra, dp, bf16 in rows:
            m = train(base, extra, dp)
            setting = {"bf16": bf16}
            worst, bad = ref.violations(setting, m)
            rl = max(abs(a - b) / abs(b) for a, b in zip(m.losses, ref.reference["loss"]))
            rg = max(abs(a - b) / abs(b) for a, b in zip(m.grad_norms, ref.reference["grad_norm"]))
            ok = not bad
            wrong += ok != expect_ok
            print(f"{name:<40s} {ref.kind(setting):>9s} {rl:9.2e} {rg:9.2e} {worst:8.3g}  "
                  f"{'pass' if ok else 'numerics_drift'}{'' if ok == expect_ok else '  <-- WRONG'}", flush=True)
    print(f"\n{wrong} wrong verdict(s)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
