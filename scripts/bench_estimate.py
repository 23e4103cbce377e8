"""Benchmark: the pre-flight estimate vs real measured peaks, and vs the analytical estimate.

    python scripts/bench_estimate.py --calibrate          # the measured constant for what trackers cannot see
    python scripts/bench_estimate.py --minigpt            # every minigpt layout that runs here: error table
    python scripts/bench_estimate.py --scale              # torchtitan llama3 8B on 64 ranks, 70B on 256
    python scripts/bench_estimate.py --torchtitan         # torchtitan's llama3 trained for real on one process
    python scripts/bench_estimate.py --calibrate-torchtitan   # torchtitan's constants, from real 2-rank trials
    python scripts/bench_estimate.py --replay --seeds 10 --caps 768,600,500   # the tuner with/without the estimate

Errors are (estimate - measured) / measured of the per-process peak; rank order is the share of setting pairs
whose order by memory the estimate gets right (pairs whose measured peaks differ by under 2% are ties, skipped).
Measurements are cached in --cache (a killed benchmark resumes); --fresh ignores the cache.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infrarsi.contract.model import load_contract  # noqa: E402

MiB = 2**20
ROOT = Path(__file__).resolve().parents[1]


def _cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def minigpt_grid(full: bool = False) -> list[dict]:
    """The shipped minigpt contract's memory knobs: micro-batch x recompute x attention in fp32, and bf16 at
    micro-batch 4 and 16 (threads 1; adam foreach). --full adds bf16 everywhere."""
    out = []
    for mbs, rc, attn, bf16 in itertools.product((1, 2, 4, 8, 16), ("none", "selective", "full"), ("auto", "unfused"),
                                                  (False, True)):
        if bf16 and not full and mbs not in (4, 16):
            continue
        out.append({"micro_batch_size": mbs, "recompute_granularity": rc, "attention_backend": attn, "bf16": bf16,
                    "intra_op_threads": 1})
    return out


def pairs_right(est: list[float], meas: list[float], tie: float = 0.02) -> tuple[int, int]:
    right = total = 0
    for i, j in itertools.combinations(range(len(est)), 2):
        if abs(meas[i] - meas[j]) <= tie * max(meas[i], meas[j]):
            continue
        total += 1
        right += (est[i] - est[j]) * (meas[i] - meas[j]) > 0
    return right, total


def run_minigpt(args) -> int:
    from infrarsi.adapters.minigpt import MiniGPTAdapter
    from infrarsi.estimate import estimate
    from infrarsi.estimate.measure import measured_peak_minigpt
    from infrarsi.priors.offline import memory_estimator

    contract = load_contract(ROOT / "contracts/minigpt-cpu.toml")
    space = MiniGPTAdapter().knob_space(contract)
    analytical = memory_estimator(space, workload=dict(contract.workload.args), hardware=contract.hardware.model_dump())
    cache_path = Path(args.cache)
    cache = {} if args.fresh else _cache(cache_path)
    grid = minigpt_grid(args.full)
    if args.limit:
        grid = grid[:: max(1, round(len(grid) / args.limit))]
    rows = []
    for s in grid:
        key = json.dumps(s, sort_keys=True)
        if key not in cache:
            cache[key] = {"measured": measured_peak_minigpt(contract, s)}
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1))
        e = estimate(contract, s)
        full = space.complete(s)
        rows.append((s, cache[key]["measured"], e, analytical(full)))
    print(f"{'mbs':>3} {'recompute':>9} {'attn':>7} {'bf16':>5} | {'measured':>8} {'estimate':>8} {'err':>6} | "
          f"{'analytic':>8} {'err':>6} | tracked: params grads opt act temp  (MiB)")
    errs, aerrs = [], []
    for s, m, e, a in rows:
        err, aerr = e.peak_bytes / m - 1, a / m - 1
        errs.append(err)
        aerrs.append(aerr)
        c = e.by_category()
        print(f"{s['micro_batch_size']:>3} {s['recompute_granularity']:>9} {s['attention_backend']:>7} {str(s['bf16']):>5} | "
              f"{m / MiB:8.0f} {e.peak_bytes / MiB:8.0f} {err:+6.1%} | {a / MiB:8.0f} {aerr:+6.1%} | "
              f"{c['parameters'] / MiB:.0f} {c['gradients'] / MiB:.0f} {c['optimizer'] / MiB:.0f} "
              f"{c['activations'] / MiB:.0f} {c['temporaries'] / MiB:.0f}")
    meas = [m for _, m, _, _ in rows]
    r, t = pairs_right([e.peak_bytes for _, _, e, _ in rows], meas)
    ar, at = pairs_right([a for *_, a in rows], meas)
    print(f"\n{len(rows)} settings; unseen constant {rows[0][2].unseen_bytes / MiB:.0f} MiB ({rows[0][2].unseen_source})")
    print(f"estimate:   median |error| {statistics.median(map(abs, errs)):.1%}, max {max(map(abs, errs)):.1%}, "
          f"rank order right in {r}/{t} pairs ({r / max(t, 1):.1%})")
    print(f"analytical: median |error| {statistics.median(map(abs, aerrs)):.1%}, max {max(map(abs, aerrs)):.1%}, "
          f"rank order right in {ar}/{at} pairs ({ar / max(at, 1):.1%})")
    print(f"estimate wall time: median {statistics.median(e.wall_s for _, _, e, _ in rows):.2f} s per setting")
    return 0


# (contract, ranks, setting over its baseline, published GiB or None, where it is published)
SCALE = (
    ("llama3-8b-h100x64.toml", 8, {}, 82.4, "torchtitan docs/performance.md Table 1: FSDP, eager"),
    ("llama3-8b-h100x64.toml", 64, {}, None, ""),
    ("llama3-8b-h100x64.toml", 128, {}, 67.0, "torchtitan docs/performance.md Table 3: FSDP, eager"),
    ("llama3-70b-h100x256.toml", 256, {}, 71.9, "torchtitan docs/performance.md Table 4: 2D, with torch.compile "
                                               "+ Float8 (the estimate is eager bf16)"),
)


def run_scale(args) -> int:
    from infrarsi.estimate import estimate
    from infrarsi.estimate.run import anchored
    from infrarsi.estimate.devices import device_for

    GiB = 2**30
    print(f"{'model':>12} {'ranks':>5} {'layout':>38} | {'params':>6} {'grads':>6} {'opt':>6} {'act':>6} {'temp':>6} "
          f"{'comm':>6} {'+unseen':>7} | {'estimate':>8} {'published':>9} | {'roofline':>8} {'wall':>6}")
    for name, ranks, setting, published, source in SCALE:
        if args.only and args.only not in f"{name}:{ranks}":
            continue
        path = ROOT / "contracts" / name
        c = anchored(load_contract(path), path.parent)
        c = c.model_copy(update={"hardware": c.hardware.model_copy(update={"devices": ranks})})
        e = estimate(c, setting, device=device_for(c.hardware))
        cat = e.by_category()
        lay = e.layout
        layout = f"fsdp {lay['dp_shard']} tp {lay['tp']} lb {lay['local_batch']} ac {lay['ac'].split()[0]}"
        pub = f"{published:9.1f}" if published else f"{'-':>9}"
        print(f"{lay['model']:>12} {ranks:5d} {layout:>38} | " + " ".join(f"{cat[k] / GiB:6.2f}" for k in (
            "parameters", "gradients", "optimizer", "activations", "temporaries", "communication"))
              + f" {e.unseen_bytes / GiB:7.2f} | {e.peak_bytes / GiB:8.2f} {pub} | {e.step_time_s or 0:7.2f}s "
              f"{e.wall_s:5.0f}s" + (f"   [{source}]" if source else ""), flush=True)
    return 0


def _replay_truth(args, contract, settings) -> dict[str, dict]:
    """Setting key -> {"peak": bytes, "step_s": s} of a real, uncapped 3-iteration minigpt run (cached)."""
    from infrarsi.estimate.measure import measured_minigpt

    cache_path = Path(args.cache).with_name("replay.json")
    cache = {} if args.fresh else _cache(cache_path)
    for s in settings:
        key = json.dumps(s.to_dict(), sort_keys=True)
        if key not in cache:
            peak, step = measured_minigpt(contract, s, iters=3)
            cache[key] = {"peak": peak, "step_s": step}
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1))
    return {json.dumps(s.to_dict(), sort_keys=True): cache[json.dumps(s.to_dict(), sort_keys=True)] for s in settings}


def run_replay(args) -> int:
    """The tuner with the fake-step estimate, the analytical estimate or no offset, replayed on real minigpt
    measurements under several memory caps.

    Every memory layout of the shipped contract in fp32 (threads 1, adam foreach: 30 settings) is run for real once,
    uncapped, 3 iterations: its peak and the third step time are the oracle. Under a cap, a trial whose real peak
    exceeds it is an OOM (what the cap would make of it), and the best is the fastest setting that fits. The run
    stage's tuner (offline priors, its config, the contract's budget after the baseline) then searches per seed
    with each offset; "none" is the memory model on the offline priors alone."""
    import math
    import os

    from infrarsi.adapters.minigpt import MiniGPTAdapter
    from infrarsi.estimate import memory_estimator as estimate_offset
    from infrarsi.priors.offline import memory_estimator, offline_priors
    from infrarsi.search import Outcome, Tuner, TunerConfig
    from infrarsi.trial.status import TrialStatus

    contract = load_contract(ROOT / "contracts/minigpt-cpu.toml")
    full = MiniGPTAdapter().knob_space(contract)
    space = full.restrict({"intra_op_threads": [1], "adam_impl": ["foreach"], "bf16": [False]}, keep=full.names)
    settings = list(space.enumerate())  # valid settings only (constraints applied)
    truth = _replay_truth(args, contract, settings)
    wl, hw = dict(contract.workload.args), contract.hardware.model_dump()
    priors = offline_priors(space, workload=wl, hardware=hw)
    os.environ["INFRARSI_MEMORY_OFFSET"] = "estimate"
    offsets = {"none": None, "analytical": memory_estimator(space, workload=wl, hardware=hw),
               "estimate": estimate_offset(space, contract)}
    meas = [truth[json.dumps(x.to_dict(), sort_keys=True)]["peak"] for x in settings]
    for name, off in offsets.items():
        if off is None:
            continue
        est = [off(x) for x in settings]
        errs = [e / m - 1 for e, m in zip(est, meas)]
        r, t = pairs_right(est, meas)
        print(f"{name:>10} offset vs the {len(settings)} measured peaks: median |error| "
              f"{statistics.median(map(abs, errs)):.1%}, max {max(map(abs, errs)):.1%}, rank order {r}/{t} ({r / max(t, 1):.1%})")
    budget = contract.budget.max_trials
    baseline = space.complete(contract.baseline)
    caps = [float(c) * MiB for c in args.caps.split(",")] if args.caps else [contract.hardware.memory_capacity_bytes]
    table = []
    for cap in caps:
        feasible = {k: v for k, v in truth.items() if v["peak"] <= cap}
        if truth[json.dumps(baseline.to_dict(), sort_keys=True)]["peak"] > cap:
            raise SystemExit(f"--caps {cap / MiB:.0f}: the baseline itself exceeds it; give caps above its peak")
        best = min(v["step_s"] for v in feasible.values())
        print(f"\ncap {cap / MiB:.0f} MiB: {len(truth) - len(feasible)} of {len(truth)} settings exceed it; "
              f"best feasible step {best * 1000:.0f} ms", flush=True)

        def outcome(s):
            v = truth[json.dumps(s.to_dict(), sort_keys=True)]
            if v["peak"] > cap:
                return Outcome("oom")
            return Outcome("ok", step_time_s=v["step_s"], peak_memory_bytes=v["peak"])

        for name, off in offsets.items():
            rows, oom_at = [], {}
            for seed in range(args.seeds):
                tuner = Tuner(space, memory_capacity_bytes=cap, priors=priors, seed=seed, noise_cv=0.02,
                              config=TunerConfig(n_initial=max(3, min(TunerConfig.n_initial, budget // 3))),
                              memory_estimate=off)
                tuner.tell(baseline, outcome(baseline))
                ooms, first_best, best_seen = 0, math.inf, math.inf
                for i in range(1, budget + 1):
                    batch = tuner.ask(1)
                    if not batch:
                        break
                    o = outcome(batch[0])
                    tuner.tell(batch[0], o)
                    ooms += o.status is TrialStatus.OOM
                    if o.status is TrialStatus.OOM:
                        x = batch[0]
                        label = f"mbs {x['micro_batch_size']} {x['recompute_granularity']} {x['attention_backend']}"
                        oom_at[label] = oom_at.get(label, 0) + 1
                    if o.status is TrialStatus.OK:
                        best_seen = min(best_seen, o.step_time_s)
                        if o.step_time_s <= best * 1.02 and first_best == math.inf:
                            first_best = i
                rows.append((ooms, first_best, best_seen / best))
            hit = [f for _, f, _ in rows if f < math.inf]
            line = (cap / MiB, len(truth) - len(feasible), name, sum(o for o, _, _ in rows),
                    statistics.mean(o for o, _, _ in rows), len(hit), len(rows),
                    statistics.median(hit) if hit else None, statistics.mean(b for *_, b in rows))
            table.append(line)
            print(f"{name:>10}: OOM trials {line[3]} in {len(rows)} seeds (mean {line[4]:.1f} of {budget}); reached the "
                  f"best (2%) in {len(hit)}/{len(rows)} seeds, median trial {line[7] if hit else '-'}; best found mean "
                  f"{line[8]:.3f}x; per seed OOMs {[o for o, _, _ in rows]}; OOM settings {oom_at or '-'}", flush=True)
    print("\n| cap MiB | settings over it | memory offset | OOM trials (all seeds) | per seed | seeds reaching the best "
          "(2%) | median trial reaching it | best found |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for cap, over, name, tot, mean, nhit, n, med, bf in table:
        print(f"| {cap:.0f} | {over}/{len(truth)} | {name} | {tot} | {mean:.1f} | {nhit}/{n} | "
              f"{med if med is not None else '-'} | {bf:.3f}x |")
    return 0


TT_JOB = """
[model]
name = "llama3"
flavor = "debugmodel"
[optimizer]
name = "AdamW"
lr = 8e-4
[training]
local_batch_size = 4
seq_len = 512
steps = 10
dataset = "c4_test"
[parallelism]
data_parallel_shard_degree = -1
[activation_checkpoint]
mode = "selective"
"""


def run_torchtitan(args) -> int:
    """torchtitan's llama3 debugmodel trained for real in one process (tests/estimate/torchtitan_step.py: torchtitan's
    model, parallelize_llama, build_optimizers, loss) vs the estimate; the process base is measured at a tiny size
    (local batch 1, seq 32) and the rest of the grid is held out."""
    import os
    import subprocess
    import tempfile

    from infrarsi.adapters.torchtitan.estimate import estimate_job, job_config

    job = Path(tempfile.mkdtemp()) / "debug.toml"
    job.write_text(TT_JOB)
    cache_path = Path(args.cache).with_name("torchtitan.json")
    cache = {} if args.fresh else _cache(cache_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def measured(over: list[str]) -> float:
        key = " ".join(over)
        if key not in cache:
            p = subprocess.run([sys.executable, str(ROOT / "tests/estimate/torchtitan_step.py"), str(job), *over],
                               capture_output=True, text=True, env=env, timeout=1800)
            line = [x for x in p.stdout.splitlines() if x.startswith("peak_data_bytes=")]
            if not line:
                raise SystemExit(f"torchtitan step failed: {p.stderr.strip().splitlines()[-3:]}")
            cache[key] = int(line[0].split("=")[1])
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1))
        return cache[key]

    def tracked(over: list[str]):
        return estimate_job(job_config(["--job.config_file", str(job), *over]), world_size=1)

    from types import SimpleNamespace

    from infrarsi.fakestep.overhead import unseen_bytes
    from infrarsi.adapters.torchtitan.estimate import FRAGMENTING, cpu_rank

    tiny = ["--training.local_batch_size", "1", "--training.seq_len", "32"]
    base = measured(tiny) - tracked(tiny).tracked_bytes
    print(f"process base (measured now at local batch 1, seq 32; adapters/torchtitan/estimate.RANK_BASE carries it): "
          f"{base / MiB:.1f} MiB")
    cpu = SimpleNamespace(hardware=SimpleNamespace(kind="cpu"))
    rows = []
    for ac, lb in itertools.product(("none", "selective", "full"), (2, 8)):
        over = ["--activation_checkpoint.mode", ac, "--training.local_batch_size", str(lb)]
        e = tracked(over)
        m = measured(over)
        transient = sum(e.tracked.get(c, 0) for c in FRAGMENTING)
        unseen, _ = unseen_bytes(cpu, bf16=True, transient_bytes=transient, rank=lambda: cpu_rank(transient))
        rows.append((ac, lb, m, e.tracked_bytes + unseen, e))
    print(f"{'ac':>9} {'lb':>3} | {'measured':>8} {'estimate':>8} {'err':>6} | tracked: params grads opt act temp (MiB)")
    for ac, lb, m, est, e in rows:
        c = e.by_category()
        print(f"{ac:>9} {lb:3d} | {m / MiB:8.0f} {est / MiB:8.0f} {est / m - 1:+6.1%} | {c['parameters'] / MiB:.0f} "
              f"{c['gradients'] / MiB:.0f} {c['optimizer'] / MiB:.0f} {c['activations'] / MiB:.0f} {c['temporaries'] / MiB:.0f}")
    errs = [est / m - 1 for *_, m, est, _ in rows]
    r, t = pairs_right([est for *_, est, _ in rows], [m for *_, m, _, _ in rows])
    print(f"median |error| {statistics.median(map(abs, errs)):.1%}, max {max(map(abs, errs)):.1%}; rank order right in "
          f"{r}/{t} pairs")
    return 0

TT_CONTRACT = ROOT / "contracts/torchtitan-cpu.toml"
# (name, setting changes from the baseline, extra torchtitan arguments). The first four fit the constants: the bare
# process (local batch 1, seq 32: a few MiB of tensors) and the three activation-checkpointing modes at the job's
# shape. The rest are held out.
TT_FIT = [("bare (local batch 1, seq 32)", {}, ["--training.local_batch_size", "1", "--training.seq_len", "32"]),
          ("AC full", {"recompute_granularity": "full"}, []),
          ("AC selective (baseline)", {}, []),
          ("AC none", {"recompute_granularity": "none"}, [])]
TT_HELD_OUT = [("fp32 params", {"bf16": False}, []),
               ("AC none, fp32 params", {"recompute_granularity": "none", "bf16": False}, []),
               ("AC none, local batch 4", {"recompute_granularity": "none", "micro_batch_size": 4}, []),
               ("local batch 2", {"micro_batch_size": 2}, []),
               ("TP 2", {"tensor_parallel": 2, "data_parallel": 1, "sequence_parallel": True}, [])]


def run_calibrate_torchtitan(args) -> int:
    """torchtitan's constants (adapters/torchtitan/estimate.py's RANK_BASE, RANK_FRAGMENTATION) from the process
    a trial of contracts/torchtitan-cpu.toml really is: torchtitan.train through the CPU launcher under torchrun,
    2 ranks on gloo, with its tokenizer and dataloader, launched as the adapter launches a trial (no cap). The
    unseen bytes of a run are its reported peak (the highest memory line of any rank, what the tuner is told) minus
    the fake step's tracked bytes for the same job; a least-squares line over the TT_FIT runs gives
    base + fragmentation x transient (the tracked categories adapters/torchtitan/estimate.FRAGMENTING names), and the
    TT_HELD_OUT runs test it."""
    import os
    import subprocess

    from infrarsi.adapters.torchtitan import TorchtitanAdapter
    from infrarsi.adapters.torchtitan.log import parse_torchtitan_log
    from infrarsi.estimate.run import anchored
    from infrarsi.adapters.torchtitan.estimate import FRAGMENTING, estimate_job, job_args, job_config

    contract = load_contract(TT_CONTRACT)
    adapter = TorchtitanAdapter(base_dir=TT_CONTRACT.parent)
    anchored_c = anchored(contract, TT_CONTRACT.parent)
    cache_path = Path(args.cache).with_name("torchtitan_trials.json")
    cache = {} if args.fresh else _cache(cache_path)

    def measured(name: str, change: dict, extra: list[str]) -> float:
        if name not in cache:
            spec = adapter.launch(contract, change)
            p = subprocess.run([*spec.argv, *extra], cwd=ROOT, env={**os.environ, **spec.env}, capture_output=True,
                               text=True, timeout=900)
            steps = parse_torchtitan_log(p.stdout + p.stderr)
            if p.returncode != 0 or not steps:
                raise SystemExit(f"{name}: torchtitan trial failed (exit {p.returncode}): "
                                 f"{(p.stderr.strip().splitlines() or [''])[-1]}")
            cache[name] = max(st.memory_gib for st in steps) * 2**30
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1))
        return cache[name]

    def tracked(change: dict, extra: list[str]):
        setting = {**contract.baseline, **change}
        e = estimate_job(job_config(job_args(anchored_c, setting, adapter=adapter) + extra), world_size=int(contract.hardware.devices))
        return e.tracked_bytes, sum(e.tracked.get(c, 0) for c in FRAGMENTING)

    rows = []
    for name, change, extra in TT_FIT + TT_HELD_OUT:
        m = measured(name, change, extra)
        tr, transient = tracked(change, extra)
        rows.append((name, m, tr, transient))
        print(f"  {name}: measured {m / MiB:.0f} MiB, tracked {tr / MiB:.1f} MiB, transient {transient / MiB:.1f} MiB",
              flush=True)
    fit = rows[:len(TT_FIT)]
    xs, ys = [r[3] for r in fit], [r[1] - r[2] for r in fit]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    frag = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs))
    base = my - frag * mx
    print(f"base {base / MiB:.1f} MiB, fragmentation {frag:.3f} (least squares over the {len(fit)} fit runs)")
    print(f"{'setting':>28} | {'measured':>8} {'estimate':>8} {'err':>6}  (MiB)")
    errs = []
    for i, (name, m, tr, transient) in enumerate(rows):
        est = tr + base + frag * transient
        errs.append(est / m - 1)
        print(f"{name:>28} | {m / MiB:8.0f} {est / MiB:8.0f} {est / m - 1:+6.1%}{'  (fit)' if i < len(fit) else ''}")
    held = errs[len(fit):]
    print(f"held out: median |error| {statistics.median(map(abs, held)):.1%}, max {max(map(abs, held)):.1%}; "
          f"rms over all {math.sqrt(statistics.fmean(e * e for e in errs)):.1%}")
    tt_prices(contract, adapter, cache["AC selective (baseline)"])
    return 0


def tt_prices(contract, adapter, baseline_peak: float, runs: int = 4) -> None:
    """The P(OOM) the run stage's tuner gives each setting of TT_FIT and TT_HELD_OUT once the doctor's ``runs``
    baseline runs (at ``baseline_peak`` bytes each) are told: the contract's priors, the estimate as offset, the
    constants in overhead.py as they are now."""
    import tempfile

    from infrarsi.priors import priors_for
    from infrarsi.search import Outcome, Tuner
    from infrarsi.estimate.choice import memory_estimate

    space = adapter.knob_space(contract)
    est = memory_estimate(space, contract, contract_dir=TT_CONTRACT.parent)
    priors = priors_for(space, workload=dict(contract.workload.args), hardware=contract.hardware.model_dump(),
                        record_dir=Path(tempfile.mkdtemp()))
    tuner = Tuner(space, memory_capacity_bytes=contract.hardware.memory_capacity_bytes, priors=priors, seed=0,
                  memory_estimate=est)
    base = space.complete(contract.baseline)
    for _ in range(runs):
        tuner.tell(base, Outcome("ok", step_time_s=1.0, peak_memory_bytes=baseline_peak))
    cap = contract.hardware.memory_capacity_bytes
    print(f"P(OOM) under the {cap / 2**30:g} GiB cap after {runs} baseline runs at {baseline_peak / 2**30:.2f} GiB "
          f"(the tuner proposes up to {tuner.config.max_p_oom:g}):")
    for name, change, extra in TT_FIT[1:] + TT_HELD_OUT:
        s = {**contract.baseline, **change}
        if extra or not space.is_valid(space.complete(s)):
            continue
        print(f"{name:>28} | estimate {est(space.complete(s)) / 2**30:.3f} GiB | P(OOM) {tuner.p_oom([s])[0]:.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minigpt", action="store_true")
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--scale", action="store_true")
    p.add_argument("--limit", type=int, default=0, help="measure only about this many settings of the grid")
    p.add_argument("--cache", default=str(ROOT / ".infrarsi/bench_estimate/minigpt.json"))
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--only", default="", help="--scale: only rows whose 'contract:ranks' contains this")
    p.add_argument("--replay", action="store_true", help="the tuner with/without the estimate on real measurements")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--caps", default="", help="--replay: memory caps in MiB, comma-separated (default: the contract's)")
    p.add_argument("--torchtitan", action="store_true", help="torchtitan's model trained for real vs the estimate")
    p.add_argument("--calibrate-torchtitan", action="store_true",
                   help="torchtitan's measured constants from real 2-rank trials of contracts/torchtitan-cpu.toml")
    p.add_argument("--full", action="store_true", help="the whole grid (bf16 at every micro-batch)")
    args = p.parse_args(argv)
    if args.calibrate:
        from infrarsi.estimate.measure import calibrate

        for name, v in calibrate().items():
            print(f"{name}: {v / MiB:.1f} MiB" if name.startswith("base") else f"{name}: {v:.3f} per byte")
    if args.minigpt:
        run_minigpt(args)
    if args.scale:
        run_scale(args)
    if args.replay:
        run_replay(args)
    if args.torchtitan:
        run_torchtitan(args)
    if args.calibrate_torchtitan:
        run_calibrate_torchtitan(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
