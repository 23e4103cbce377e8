"""Trust checks on real minigpt trials: A/A false promotions, and calibration of the time model's intervals.

``aa``: the run stage's re-verification rule with the candidate equal to the baseline, on real training
processes (LocalExecutor, one at a time, A then B back to back). The doctor runs first (its noise profile
gives the mde and the repeat count exactly as `infrarsi run` takes them: repeats = max(2, min(repeats for
the target effect, 4))); then each repetition runs that many A/A pairs, replaces disturbed pairs by the run
stage's rule (verify.reverify.disturbed_pairs) and applies speedup.promote. Every promotion is false;
target <= 5%.

``reproduce``: for a finished run directory (e.g. the demo's), every promoted candidate is run again fresh
(new processes, A then B back to back, the verification's own repeat count per reproduction), ``--reps``
times; each reproduction's paired speedup is checked against the 95% CI the verification reported.
Target: inside in >= 90% of reproductions.

``calibration``: the tuner's time model on held-back trials it never saw. On each of the simulated
clusters, the tuner (as the run stage builds it, with the analytical memory estimate) searches ``--budget``
trials; then ``--held`` further valid settings are drawn at random, and the tuner's 90% posterior
predictive interval of each one's step time (additive model + residual GP + the fitted noise) is checked
against a fresh noisy run of it. Target: about 90% inside.

    nice python scripts/bench_trust.py aa --reps 20 [--size tiny|contract] [--seed-offset 0]
    nice python scripts/bench_trust.py reproduce --run-dir .infrarsi/demo --reps 5
    python scripts/bench_trust.py calibration --seeds 5 [--seed-offset 0] [--budget 20] [--held 10]
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# A 4-layer minigpt small enough that one run takes seconds on a busy 2-core machine (--size tiny), or the
# shipped contract itself (--size contract).
TINY_ARGS = ("num_layers = 4, hidden_size = 32, num_attention_heads = 4, seq_length = 32, vocab_size = 64, "
             "global_batch_size = 8, train_iters = 10, lr = 1e-3, seed = 1234")


def contract_text(size: str) -> str:
    text = (ROOT / "contracts/minigpt-cpu.toml").read_text()
    if size == "tiny":
        text = re.sub(r"^args = \{.*\}$", "args = { " + TINY_ARGS + " }", text, count=1, flags=re.M)
    return text


def aa(args) -> int:
    from infrarsi.contract import write_lock
    from infrarsi.adapters import get_adapter
    from infrarsi.doctor.baseline import run_doctor
    from infrarsi.execute import make_executor
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner
    from infrarsi.trial import TrialStatus
    from infrarsi.verify.speedup import promote, speedup_ci
    from infrarsi.verify.reverify import MAX_DISTURBED, disturbed_pairs

    root = Path(tempfile.mkdtemp(prefix="bench-aa-"))
    (root / "c.toml").write_text(contract_text(args.size))
    run_dir = root / "run"
    contract, _ = write_lock(root / "c.toml", run_dir)
    adapter = get_adapter("minigpt")
    t0 = time.time()
    noise = run_doctor(run_dir, contract, adapter=adapter).noise
    repeats = max(2, min(noise.repeats_for_target, 4))
    print(f"minigpt {args.size}: doctor CV {noise.cv:.2%}, mde {noise.mde:.2%} over {noise.repeats} runs, "
          f"{repeats} A/A pairs per repetition ({time.time() - t0:.0f} s)", flush=True)
    print(f"{'rep':>4s} {'speedup':>8s} {'95% CI':>17s} {'disturbed':>9s}  promoted", flush=True)
    record = RunRecord(run_dir)
    base = adapter.knob_space(contract).complete(contract.baseline)
    promoted, lows = 0, []
    with Runner(record, make_executor(), adapter, contract, config=Runner.Config(parallel=1)) as runner:
        for r in range(args.seed_offset, args.seed_offset + args.reps):
            pairs, disturbed = [], []
            while True:
                used = [p for p in pairs if p not in disturbed]
                while len(used) < repeats:
                    a = runner.submit(base, role="verify").result()
                    b = runner.submit(base, role="verify").result()
                    pairs.append((a, b))
                    used.append((a, b))
                bad = disturbed_pairs(used)
                if not bad or len(disturbed) >= MAX_DISTURBED:
                    break
                disturbed += bad[: MAX_DISTURBED - len(disturbed)]
            ok = [(a, b) for a, b in pairs if (a, b) not in disturbed
                  and a.status is TrialStatus.OK and b.status is TrialStatus.OK]
            sp = speedup_ci([a.metrics.step_time_s for a, _ in ok], [b.metrics.step_time_s for _, b in ok])
            passed, _ = promote(sp, noise.mde)
            promoted += passed
            lows.append(sp.lo)
            print(f"{r:4d} {sp.speedup:8.4f} [{sp.lo:.4f}, {sp.hi:.4f}] {len(disturbed):9d}  {'YES' if passed else 'no'}",
                  flush=True)
    n = args.reps
    print(f"\nA/A on real minigpt ({args.size}) trials: {promoted} of {n} repetitions promoted "
          f"({promoted / n:.1%}; target <= 5%); median CI lower bound {statistics.median(lows):.4f} vs bar "
          f"1 + mde = {1 + noise.mde:.4f}; {time.time() - t0:.0f} s")
    return 0 if promoted / n <= 0.05 else 1


def reproduce(args) -> int:
    from infrarsi.adapters import get_adapter
    from infrarsi.contract import load_locked
    from infrarsi.execute import make_executor
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner
    from infrarsi.trial import TrialStatus
    from infrarsi.report.load import load_run
    from infrarsi.verify.speedup import speedup_ci

    data = load_run(args.run_dir)
    contract = load_locked(args.run_dir)
    ver = data.verification or {}
    cands = [c for c in ver.get("candidates", []) if c.get("promoted")]
    if not cands:
        print(f"{args.run_dir}: no promoted candidate to reproduce")
        return 1
    adapter = get_adapter(contract.workload.adapter)
    space = adapter.knob_space(contract)
    base = space.complete(ver["baseline"])
    repeats = int(ver.get("repeats", 2))
    record = RunRecord(Path(args.run_dir))
    inside = total = 0
    print(f"{'candidate':<60s} {'reported 95% CI':>18s} {'rerun':>8s}  inside")
    with Runner(record, make_executor(), adapter, contract, config=Runner.Config(parallel=1)) as runner:
        for c in cands:
            cand = space.complete(c["setting"])
            lo, hi = c["ci95"]
            label = ", ".join(f"{k}={v}" for k, v in cand.items() if base.get(k) != v)[:60]
            for _ in range(args.reps):
                pairs = [(runner.submit(base, role="reproduce").result(), runner.submit(cand, role="reproduce").result())
                         for _ in range(repeats)]
                ok = [(a, b) for a, b in pairs if a.status is TrialStatus.OK and b.status is TrialStatus.OK]
                if len(ok) < 2:
                    print(f"{label:<60s} {'':>18s} {'failed':>8s}  -")
                    continue
                sp = speedup_ci([a.metrics.step_time_s for a, _ in ok], [b.metrics.step_time_s for _, b in ok])
                hit = lo <= sp.speedup <= hi
                inside, total = inside + hit, total + 1
                print(f"{label:<60s} [{lo:7.3f}, {hi:7.3f}] {sp.speedup:8.3f}  {'yes' if hit else 'NO'}", flush=True)
    print(f"\nreproductions inside the reported 95% CI: {inside} of {total} ({inside / max(total, 1):.0%}; "
          f"target >= 90%)")
    return 0 if total and inside / total >= 0.9 else 1


def calibration(args) -> int:
    from infrarsi.priors import priors_for
    from infrarsi.priors.offline import memory_estimator
    from infrarsi.trial.prior import Z90
    from infrarsi.search import Outcome, Tuner
    from infrarsi.workloads.simulated import WORKLOADS, get_workload, simulate, space_for

    cv = 0.02
    print(f"{'workload':<20s} {'seed':>4s} {'held':>5s} {'inside 90%':>10s}")
    inside = total = 0
    for name in WORKLOADS:
        w = get_workload(name)
        space = space_for(name)
        hw, wl = {"kind": w.gpu, "devices": w.world_size}, w.model.model_dump()
        for seed in range(args.seed_offset, args.seed_offset + args.seeds):
            t = Tuner(space, memory_capacity_bytes=float(w.spec.memory_bytes), priors=priors_for(space, workload=wl,
                      hardware=hw), seed=seed, initial=[space.complete(w.baseline)], noise_cv=cv,
                      memory_estimate=memory_estimator(space, workload=wl, hardware=hw))
            for k in range(args.budget):
                s = t.ask()
                r = simulate(w, s, seed=seed * 1000 + k, noise_cv=cv)
                t.tell(s, Outcome("oom") if r.step_time_s is None else
                       Outcome("ok", step_time_s=r.step_time_s, peak_memory_bytes=r.peak_memory_bytes))
            seen = {s for s, _ in t.history}
            held = [s for s in space.candidates(400, random.Random(seed + 7)) if s not in seen]
            t.fit_models()
            n_in = n = 0
            for s in held:
                r = simulate(w, s, seed=seed * 1000 + 500 + n, noise_cv=cv)
                if r.step_time_s is None:
                    continue  # an OOM has no step time to check
                mean, sd = t.predict_time([s])
                sd_pred = math.sqrt(float(sd[0]) ** 2 + t.time_model.sigma ** 2)
                n_in += abs(math.log(r.step_time_s) - float(mean[0])) <= Z90 * sd_pred
                n += 1
                if n >= args.held:
                    break
            inside, total = inside + n_in, total + n
            print(f"{name:<20s} {seed:4d} {n:5d} {n_in / max(n, 1):10.0%}", flush=True)
    print(f"\nheld-back trials inside the time model's 90% interval: {inside} of {total} ({inside / total:.1%}; "
          f"target ~90%)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="check", required=True)
    a = sub.add_parser("aa")
    a.add_argument("--reps", type=int, default=20)
    a.add_argument("--size", choices=("tiny", "contract"), default="tiny")
    a.add_argument("--seed-offset", type=int, default=0, help="number the repetitions from here (labels only)")
    p = sub.add_parser("reproduce")
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--reps", type=int, default=5)
    c = sub.add_parser("calibration")
    c.add_argument("--seeds", type=int, default=5)
    c.add_argument("--seed-offset", type=int, default=0, help="first seed: seeds seed-offset .. seed-offset + seeds - 1")
    c.add_argument("--budget", type=int, default=20)
    c.add_argument("--held", type=int, default=10)
    args = ap.parse_args(argv)
    return {"aa": aa, "reproduce": reproduce, "calibration": calibration}[args.check](args)


if __name__ == "__main__":
    sys.exit(main())
