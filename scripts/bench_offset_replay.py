"""Benchmark: the torchtitan search with and without the pre-flight estimate, replayed on real measurements of every
setting, under memory caps that bind, over seeds.

``scripts/bench_offset_tune.py`` runs the search live, but on the shipped contract no arm proposes a setting over
its cap, and a live run per seed, offset and cap costs minutes. Here every valid setting of
``contracts/torchtitan-cpu.toml`` (72) is run for real once, uncapped, as a trial launches it (the CPU launcher under
torchrun, 2 ranks on gloo, the contract's 4 steps; its reported peak and median steady step are what the tuner
would be told; cached in ``.infrarsi/bench_offset_replay/truth.json``, ~45 min once on 2 quiet cores). Under a cap,
a setting whose measured peak exceeds it is an OOM trial; the best is the fastest setting that fits.

The run stage's tuner (the contract's priors, its config and budget, the doctor's four baseline runs told first, its
stopping rule) then searches per seed with each memory offset: ``estimate`` (the fake step, the run stage's default
for torchtitan) and ``analytical`` (``priors/offline.py``). Each told step time carries lognormal noise of sd
``--noise-cv`` (the doctor measured 0.6-1.2% CV here), drawn per seed, so the seeds differ as live runs do.

    .venv/bin/python scripts/bench_offset_replay.py --seeds 10 --caps 2.25,2.1,2.0,1.95,1.9
    .venv/bin/python scripts/bench_offset_replay.py --seeds 10 --caps 2.25,2.0,1.95 --budget 16 --no-stop
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "scripts"))

from bench_estimate import pairs_right  # noqa: E402  (pairs within 2% of each other are ties, skipped)
from infrarsi.contract.model import load_contract  # noqa: E402
from infrarsi.trial.status import TrialStatus  # noqa: E402

GiB = 2**30
CONTRACT = ROOT / "contracts/torchtitan-cpu.toml"


def key_of(setting) -> str:
    return json.dumps(dict(setting), sort_keys=True)


def measure_all(contract, adapter, settings, cache_path: Path) -> dict[str, dict]:
    """Setting key -> {"peak": bytes, "step_s": s, "wall_s": s} of one real, uncapped trial (cached as it goes:
    a killed measurement resumes). The launch is the adapter's trial launch; no RLIMIT is set, because only the
    executor sets it."""
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    todo = [s for s in settings if key_of(s.to_dict()) not in cache]
    for i, s in enumerate(todo, 1):
        spec = adapter.launch(contract, s.to_dict())
        t0 = time.monotonic()
        p = subprocess.run(spec.argv, cwd=ROOT, env={**os.environ, **spec.env}, capture_output=True, text=True,
                           timeout=900)
        wall = time.monotonic() - t0
        run = adapter.parse(contract, p.stdout, p.stderr, p.returncode)
        m = run.metrics
        if run.status is not TrialStatus.OK or not m.step_time_s or not m.peak_memory_bytes:
            raise SystemExit(f"{s.to_dict()}: the uncapped trial did not finish ({run.status.value}: {run.reason}); "
                             f"last line: {(p.stderr.strip().splitlines() or [''])[-1]}")
        cache[key_of(s.to_dict())] = {"peak": m.peak_memory_bytes, "step_s": m.step_time_s, "wall_s": wall}
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        cache_path.write_text(json.dumps(cache, indent=1))
        print(f"  measured {i}/{len(todo)}: {label(s)}: {m.peak_memory_bytes / 2**20:.0f} MiB, "
              f"{m.step_time_s:.3f} s/step ({wall:.0f} s)", flush=True)
    return {key_of(s.to_dict()): cache[key_of(s.to_dict())] for s in settings}


def label(s) -> str:
    return (f"mbs {s['micro_batch_size']} AC {s['recompute_granularity']} {'compile' if s['torch_compile'] else 'eager'} "
            f"{'bf16' if s['bf16'] else 'fp32'} {s['intra_op_threads']}t")


def replay(space, contract, truth, cap: float, offset, priors, seed: int, *, noise_cv: float, mde: float,
           budget: int, stop: bool = True, baseline_runs: int = 4) -> dict:
    """One search as the run stage runs it, told the measured outcomes under ``cap``: its OOM trials, the trial
    that first reached the best (within 2%), the best it found over the true best, the trials it ran."""
    from infrarsi.search import Outcome, Tuner, TunerConfig

    rng = random.Random(seed)
    best = min(v["step_s"] for v in truth.values() if v["peak"] <= cap)

    def outcome(v: dict) -> Outcome:  # v: the setting's measurement
        if v["peak"] > cap:
            return Outcome("oom")
        return Outcome("ok", step_time_s=v["step_s"] * math.exp(rng.gauss(0.0, noise_cv)), peak_memory_bytes=v["peak"])

    cfg = TunerConfig(n_initial=max(3, min(TunerConfig.n_initial, budget // 3)), mde=mde)
    tuner = Tuner(space, memory_capacity_bytes=cap, priors=priors, seed=seed, noise_cv=noise_cv, config=cfg,
                  memory_estimate=offset)
    base = space.complete(contract.baseline)
    for _ in range(baseline_runs):
        tuner.tell(base, outcome(truth[key_of(base.to_dict())]))
    ooms, first, seen, trials, oom_labels = 0, None, math.inf, 0, []
    while trials < budget and not (stop and tuner.should_stop()):
        batch = tuner.ask(1)
        if not batch:
            break
        s = batch[0]
        v = truth[key_of(space.complete(dict(s)).to_dict())]
        o = outcome(v)
        tuner.tell(s, o)
        trials += 1
        if o.status is TrialStatus.OOM:
            ooms += 1
            oom_labels.append(label(s))
            continue
        seen = min(seen, v["step_s"])
        if first is None and v["step_s"] <= best * 1.02:
            first = trials
    return {"ooms": ooms, "first_best": first, "best_ratio": best / seen if seen < math.inf else 0.0,
            "trials": trials, "oom_labels": oom_labels}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--caps", default="2.25,2.1,2.0,1.95,1.9", help="memory caps per rank in GiB, comma-separated")
    ap.add_argument("--noise-cv", type=float, default=0.01, help="sd of the lognormal noise on told step times")
    ap.add_argument("--mde", type=float, default=0.02, help="the doctor's minimum detectable effect (stopping rule)")
    ap.add_argument("--budget", type=int, default=None, help="search trials (default: the contract's max_trials)")
    ap.add_argument("--no-stop", action="store_true", help="run the whole budget (no stopping rule): trials to the best")
    ap.add_argument("--cache", type=Path, default=ROOT / ".infrarsi/bench_offset_replay/truth.json")
    ap.add_argument("--measure-only", action="store_true", help="measure the settings and stop")
    args = ap.parse_args(argv)
    try:
        caps = [float(c) * GiB for c in args.caps.split(",") if c.strip()]
    except ValueError:
        raise SystemExit(f"--caps {args.caps!r}: give GiB per rank separated by commas, e.g. 2.25,2.0") from None

    from infrarsi.adapters.torchtitan import TorchtitanAdapter
    from infrarsi.priors import priors_for
    from infrarsi.priors.offline import memory_estimator
    from infrarsi.estimate.choice import memory_estimate

    contract = load_contract(CONTRACT)
    adapter = TorchtitanAdapter(base_dir=CONTRACT.parent)
    space = adapter.knob_space(contract)
    settings = list(space.enumerate())
    truth = measure_all(contract, adapter, settings, args.cache)
    if args.measure_only:
        return 0
    base = truth[key_of(space.complete(contract.baseline).to_dict())]
    wl, hw = dict(contract.workload.args), contract.hardware.model_dump()
    priors = priors_for(space, workload=wl, hardware=hw, record_dir=Path(tempfile.mkdtemp()))
    os.environ["INFRARSI_MEMORY_OFFSET"] = "estimate"
    offsets = {"estimate": memory_estimate(space, contract, contract_dir=CONTRACT.parent),
               "analytical": memory_estimator(space, workload=wl, hardware=hw)}
    meas = [truth[key_of(s.to_dict())]["peak"] for s in settings]
    modelled = [i for i, s in enumerate(settings) if not s["torch_compile"] and s["intra_op_threads"] == 1]
    for name, off in offsets.items():
        est = [off(s) for s in settings]
        # as an offset only ratios matter: compare each estimate / the baseline's with measured / the baseline's
        eb, mb = off(space.complete(contract.baseline)), base["peak"]
        rel = [(e / eb) / (m / mb) - 1 for e, m in zip(est, meas)]
        line = f"{name:>10}: relative to the baseline, median |error| {statistics.median(map(abs, rel)):.1%}, max " \
               f"{max(map(abs, rel)):.1%}"
        for what, idx in (("all", range(len(settings))), ("eager 1-thread", modelled)):
            err = [abs(est[i] / meas[i] - 1) for i in idx]
            right, pairs = pairs_right([est[i] for i in idx], [meas[i] for i in idx])
            line += (f"; {what} ({len(err)}): median |error| {statistics.median(err):.1%}, max {max(err):.1%}, "
                     f"rank order {right}/{pairs} ({right / max(pairs, 1):.1%})")
        print(line, flush=True)
    print(f"baseline: {base['peak'] / GiB:.3f} GiB, {base['step_s']:.3f} s/step; measured peaks "
          f"{min(meas) / GiB:.3f}-{max(meas) / GiB:.3f} GiB")
    table = []
    for cap in caps:
        if base["peak"] > cap:
            raise SystemExit(f"--caps {cap / GiB:g}: the baseline peaks at {base['peak'] / GiB:.3f} GiB; give caps above it")
        fits = {k: v for k, v in truth.items() if v["peak"] <= cap}
        opt = min(fits.values(), key=lambda v: v["step_s"])
        print(f"\ncap {cap / GiB:g} GiB: {len(truth) - len(fits)} of {len(truth)} settings exceed it; best "
              f"{opt['step_s']:.3f} s/step at {opt['peak'] / GiB:.3f} GiB", flush=True)
        for name, off in offsets.items():
            rows = [replay(space, contract, truth, cap, off, priors, seed, noise_cv=args.noise_cv, mde=args.mde,
                           budget=args.budget or contract.budget.max_trials, stop=not args.no_stop)
                    for seed in range(args.seeds)]
            hit = [r["first_best"] for r in rows if r["first_best"] is not None]
            labels: dict[str, int] = {}
            for r in rows:
                for lab in r["oom_labels"]:
                    labels[lab] = labels.get(lab, 0) + 1
            line = {"cap": cap / GiB, "over": len(truth) - len(fits), "offset": name,
                    "ooms": sum(r["ooms"] for r in rows), "seeds": len(rows), "hit": len(hit),
                    "median_first": statistics.median(hit) if hit else None,
                    "best": statistics.median(r["best_ratio"] for r in rows),
                    "trials": statistics.median(r["trials"] for r in rows), "labels": labels}
            table.append(line)
            print(f"{name:>10}: OOM trials {line['ooms']} over {len(rows)} seeds {[r['ooms'] for r in rows]}; reached "
                  f"the best (2%) in {len(hit)}/{len(rows)}, median trial {line['median_first'] or '-'}; best found "
                  f"median {line['best']:.3f}x; trials median {line['trials']}; OOMed: {labels or '-'}", flush=True)
    print("\n| cap GiB | settings over it | offset | OOM trials (all seeds) | seeds reaching the best (2%) | "
          "median trial reaching it | best found (median) | trials run (median) |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in table:
        print(f"| {r['cap']:g} | {r['over']}/{len(truth)} | {r['offset']} | {r['ooms']} | {r['hit']}/{r['seeds']} | "
              f"{r['median_first'] if r['median_first'] is not None else '-'} | {r['best']:.3f}x | {r['trials']:g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
