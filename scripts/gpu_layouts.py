"""The layouts part of the device check: megatron-core's GPT trained on one GPU at every single-GPU layout of
contracts/megatron-gpu-check-h100x1.toml (micro-batch size 1/2/4 at a fixed global batch, recompute none /
selective / full), each layout's steady step time beside the step-time model's prediction for it, and issue 68's
targets judged over the layouts.

    python scripts/gpu_layouts.py --write-plan .whl/gpu_layouts_plan.json   # here: the layouts and predictions
    python scripts/gpu_layouts.py --plan .whl/gpu_layouts_plan.json --out OUT   # on the GPU: time them
    python scripts/gpu_layouts.py --dry --out OUT   # here, on the CPU: both at a CPU-sized shape

scripts/gpu_check.sh runs it after the kernel table (``--wheels`` writes the plan, ``--dry`` rehearses).

Why a plan: the prediction is the project's own estimate code (:mod:`infrarsi.estimate.step_model` on the
contract, as ``infrarsi estimate contracts/megatron-gpu-check-h100x1.toml --fastest 9`` prints it), and each
layout's command is the Megatron adapter's launch of that setting (its flags rewritten and checked by
megatron-core's own config code). Those need the project's dependencies (pydantic, ...), which the device lacks;
the device has torch, and megatron-core's wheel with numpy and packaging travels in .whl/. So both are made here
and the device only runs the commands (launchers/pretrain_gpt_cpu.py, which needs torch and megatron-core alone).

Each layout runs as its own process (an OOM or crash ends that layout only); its step time is the median of the
iteration lines after the contract's warm-up steps (the loop synchronizes the GPU before it reads the clock, as
Megatron-LM's timers do). Targets (GPU only): mean absolute error <= 8% of the measured time, Spearman rank
correlation >= 0.9 between measured and predicted, and the predicted fastest layout within 2% of the measured
fastest. Writes OUT/gpu_layouts.md and OUT/gpu_layouts.json; exits 1 when a layout did not train.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "megatron-gpu-check-h100x1.toml"
TARGET_MAE = 0.08  # mean |predicted - measured| / measured
TARGET_SPEARMAN = 0.9
TARGET_FASTEST = 0.02  # measured time of the predicted fastest <= 1.02 x the measured fastest
GPU_BUDGET_S = 200.0  # no layout is started after this many seconds (the device check's share: ~3 minutes)
# The layouts: (micro-batch size, recompute granularity); the global batch is the launch's (8 sequences).
LAYOUTS = tuple((mbs, rc) for rc in ("none", "selective", "full") for mbs in (1, 2, 4))
# The CPU rehearsal: the same launch at a shape a CPU steps in a fraction of a second (the launch's variables).
DRY_SHAPE = {"LAYERS": "2", "HIDDEN": "128", "HEADS": "4", "FFN": "384", "SEQ": "256", "VOCAB": "1024", "GBS": "4",
             "ITERS": "4"}
DRY_LAYOUTS = ((1, "none"), (2, "none"), (4, "none"), (2, "selective"), (2, "full"))
# The loop's iteration line (infrarsi/adapters/megatron/cpu/gpt.py; adapters/megatron/log.py reads all its fields).
_STEP_MS = re.compile(r"iteration\s+\d+\s*/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*([\d.]+)")
_PEAK_MB = re.compile(r"max allocated:\s*([\d.]+)")


def make_plan(*, dry: bool) -> dict:
    """The layouts with their commands and predictions (needs the project's dependencies: run it here)."""
    from infrarsi.adapters.workload import Workload
    from infrarsi.contract.model import load_contract
    from infrarsi.estimate import step_model as sm
    from infrarsi.launch.command import split_launcher
    from infrarsi.adapters.registry import SPECS

    contract = load_contract(CONTRACT, adapters=SPECS)
    if dry:
        contract = contract.model_copy(update={"workload": contract.workload.model_copy(
            update={"script_env": {**contract.workload.script_env, **DRY_SHAPE}})})
    workload = Workload(contract, CONTRACT.parent)
    w = sm.cost_workload(workload)
    space = workload.knob_space()
    rows = []
    for mbs, rc in (DRY_LAYOUTS if dry else LAYOUTS):
        setting = space.complete({**contract.baseline, "micro_batch_size": mbs, "recompute_granularity": rc}).to_dict()
        full = sm.launch_setting(workload, setting)
        p = sm.predict(w, full, sm.capacity_bytes(workload))
        launch = split_launcher(workload.launch(setting).argv)
        rows.append({"layout": f"mbs {mbs}, recompute {rc}", "setting": setting,
                     "program": launch.program[-1], "args": list(launch.args),
                     "predicted_s": p.step_time_s, "low_s": p.low_s, "high_s": p.high_s, "regime": p.regime,
                     "predicted_gib": p.memory_bytes / 2**30})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    return {"contract": str(CONTRACT.relative_to(ROOT)), "device": contract.hardware.kind, "dry": dry,
            "shape": DRY_SHAPE if dry else "the launch's (contracts/megatron-jobs/gpu_check_gpt.sh)",
            "warmup_steps": contract.invariants.timing.warmup_steps if not dry else 1,
            "timeout_s": contract.invariants.timing.timeout_s, "commit": commit.strip(),
            "env": {"CUDA_VISIBLE_DEVICES": ""} if dry else {},  # the rehearsal trains on the CPU, GPU or not
            "made": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "layouts": rows}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_layout(row: dict, *, warmup: int, timeout_s: float, log: Path | None = None,
                env: dict[str, str] | None = None) -> dict:
    """Train one layout in its own process; its steady step seconds (median after ``warmup`` steps). ``log``: where
    the process's output goes (its last 20,000 characters of stdout and of stderr), to read a failure by."""
    # run as the launch's `torchrun --nproc-per-node 1` runs it: one process, with the variables torchrun sets
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0",
           "WORLD_SIZE": "1", "LOCAL_RANK": "0", "PYTHONUNBUFFERED": "1", **(env or {})}
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, row["program"], *row["args"]], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=timeout_s)
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = (e.stdout or b"").decode(errors="replace"), f"timed out after {timeout_s:.0f} s", -1
    wall = time.perf_counter() - t0
    if log is not None:
        log.write_text(f"$ {row['program']} {' '.join(row['args'])}\nexit {rc} after {wall:.1f} s\n--- stdout\n"
                       f"{out[-20000:]}\n--- stderr\n{(err or '')[-20000:]}\n")
    steps = [float(m) / 1000.0 for m in _STEP_MS.findall(out)]
    peaks = [float(m) for m in _PEAK_MB.findall(out)]
    res = {"wall_s": round(wall, 1), "steps_s": steps, "peak_gib": max(peaks) / 1024 if peaks else None}
    steady = steps[warmup:]
    if rc != 0 or not steady:
        last = [ln for ln in (err or out).splitlines() if ln.strip()][-1:] or ["no output"]
        res["error"] = f"exit {rc}, {len(steps)} step line(s): {last[0][:200]}"
        return res
    res["measured_s"] = statistics.median(steady)
    return res


def time_all(plan: dict, out: Path, *, budget_s: float) -> list[dict]:
    """Each layout of ``plan`` timed in turn (a row per layout: the plan's, with the measurement or why none);
    none started after ``budget_s`` seconds, nor after two failures with no success (the same failure again)."""
    logs = out / "gpu_layouts_logs"
    logs.mkdir(parents=True, exist_ok=True)
    t_start, rows = time.perf_counter(), []
    for i, row in enumerate(plan["layouts"]):
        if time.perf_counter() - t_start > budget_s:
            rows.append({**row, "error": f"skipped: the {budget_s:.0f} s budget was spent"})
            continue
        if len(rows) >= 2 and not any(r.get("measured_s") for r in rows):
            rows.append({**row, "error": "skipped: the first two layouts did not train (see gpu_layouts_logs/)"})
            continue
        res = time_layout(row, warmup=plan["warmup_steps"], timeout_s=plan["timeout_s"], log=logs / f"{i + 1}.log",
                          env=plan.get("env"))
        rows.append({**row, **res})
        m = res.get("measured_s")
        print(f"layout {row['layout']}: " + (f"{m:.4f} s/step measured, {row['predicted_s']:.4f} predicted"
                                              if m else res["error"]) + f" ({res['wall_s']} s)", flush=True)
    return rows


def ranks(values: list[float]) -> list[float]:
    """1 = smallest; ties share their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation (Pearson's over the ranks); None under 2 values or with a constant side."""
    if len(a) < 2:
        return None
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    sab = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    saa, sbb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return None if saa == 0 or sbb == 0 else sab / (saa * sbb) ** 0.5


def summary(rows: list[dict], *, judged: bool) -> dict:
    """Over the layouts that trained: MAE, Spearman, the predicted fastest's gap to the measured fastest, and the
    targets missed (``judged`` False: none judged, the dry run's CPU times beside H100 predictions)."""
    done = [r for r in rows if r.get("measured_s")]
    meas, pred = [r["measured_s"] for r in done], [r["predicted_s"] for r in done]
    out: dict = {"layouts_timed": len(done), "layouts": len(rows)}
    if not done:
        return {**out, "mae": None, "spearman": None, "fastest_gap": None, "targets_missed": ["no layout trained"]}
    out["mae"] = statistics.fmean(abs(p - m) / m for p, m in zip(pred, meas)) if judged else None
    out["spearman"] = spearman(meas, pred)
    out["predicted_fastest"] = done[min(range(len(done)), key=lambda i: pred[i])]["layout"]
    out["measured_fastest"] = done[min(range(len(done)), key=lambda i: meas[i])]["layout"]
    out["fastest_gap"] = meas[min(range(len(done)), key=lambda i: pred[i])] / min(meas) - 1
    missed = []
    if judged:
        if len(done) < len(rows):
            missed.append(f"{len(rows) - len(done)} layout(s) did not train")
        if out["mae"] > TARGET_MAE:
            missed.append(f"MAE {out['mae']:.1%} > {TARGET_MAE:.0%}")
        if out["spearman"] is None or out["spearman"] < TARGET_SPEARMAN:
            missed.append(f"Spearman {out['spearman'] if out['spearman'] is None else round(out['spearman'], 3)} "
                          f"< {TARGET_SPEARMAN}")
        if out["fastest_gap"] > TARGET_FASTEST:
            missed.append(f"predicted fastest {out['fastest_gap']:.1%} slower than the measured fastest "
                          f"(> {TARGET_FASTEST:.0%})")
    out["targets_missed"] = missed if judged else ["not judged (dry run: CPU times beside H100 predictions)"]
    return out


def markdown(plan: dict, rows: list[dict], s: dict, device: str, *, judged: bool, seconds: float) -> str:
    head = (f"# Layouts on {device}{' (dry run: CPU, a CPU-sized shape)' if not judged else ''}\n\n"
            f"{plan['contract']} (commit {plan['commit']}, plan made {plan['made']}): megatron-core's GPT, one "
            f"process per layout, steady step = median after {plan['warmup_steps']} warm-up step(s). Predicted: the "
            f"step-time model on 1 x {plan['device']}. Error = (predicted - measured) / measured (negative: the "
            "model is optimistic). Rank 1 = fastest.\n\n"
            "| layout | measured s/step | predicted s/step [interval] | error % | rank measured | rank predicted | "
            "peak GiB (predicted) | wall s | note |\n" + "|---|" * 1 + "---|" * 8 + "\n")
    done = [r for r in rows if r.get("measured_s")]
    rm = dict(zip((id(r) for r in done), ranks([r["measured_s"] for r in done])))
    rp = dict(zip((id(r) for r in done), ranks([r["predicted_s"] for r in done])))
    lines = []
    for r in rows:
        pred = f"{r['predicted_s']:.3f} [{r['low_s']:.3f}-{r['high_s']:.3f}]"
        peak = f"{r['peak_gib']:.1f}" if r.get("peak_gib") is not None else "n/a"
        peak += f" ({r['predicted_gib']:.1f})"
        if not r.get("measured_s"):
            lines.append(f"| {r['layout']} | **failed** | {pred} | | | | {peak} | {r.get('wall_s', '')} | "
                         f"{r.get('error', 'skipped')[:160]} |")
            continue
        err = f"{(r['predicted_s'] - r['measured_s']) / r['measured_s']:+.1%}" if judged else "n/a"
        lines.append(f"| {r['layout']} | {r['measured_s']:.4f} | {pred} | {err} | {rm[id(r)]:g} | {rp[id(r)]:g} | "
                     f"{peak} | {r['wall_s']} | {r['regime']} |")
    mae = "n/a (no CPU step model)" if s["mae"] is None else f"{s['mae']:.1%}"
    rho = "n/a" if s["spearman"] is None else f"{s['spearman']:.3f}"
    gap = "n/a" if s["fastest_gap"] is None else f"{s['fastest_gap']:+.1%}"
    tail = (f"\nSummary: {s['layouts_timed']} of {s['layouts']} layouts timed in {seconds:.0f} s; mean absolute "
            f"error {mae} (target "
            f"<= {TARGET_MAE:.0%}); Spearman {rho} (target >= {TARGET_SPEARMAN}); predicted fastest "
            f"{s.get('predicted_fastest', 'n/a')}, measured fastest {s.get('measured_fastest', 'n/a')}, gap {gap} "
            f"(target <= {TARGET_FASTEST:.0%}). Targets missed: {'; '.join(s['targets_missed']) or 'none'}.\n")
    return head + "\n".join(lines) + "\n" + tail


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write-plan", metavar="PATH", help="write the GPU plan (layouts, commands, predictions) and exit")
    p.add_argument("--plan", metavar="PATH", help="the plan to time (made by --write-plan)")
    p.add_argument("--dry", action="store_true", help="CPU rehearsal: a plan at a CPU-sized shape, timed here")
    p.add_argument("--out", default="gpu_check_out", help="folder for gpu_layouts.md / .json")
    p.add_argument("--budget-s", type=float, default=GPU_BUDGET_S, help="start no layout after this many seconds")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.write_plan:
        Path(args.write_plan).parent.mkdir(parents=True, exist_ok=True)
        Path(args.write_plan).write_text(json.dumps(make_plan(dry=False), indent=1))
        print(f"gpu_layouts: plan of {len(LAYOUTS)} layouts written to {args.write_plan}")
        return 0
    import torch

    gpu = torch.cuda.is_available()
    if args.dry:
        plan = make_plan(dry=True)
    elif not gpu:
        print("gpu_layouts: no CUDA GPU here; run with --dry for the CPU rehearsal", file=sys.stderr)
        return 2
    elif not args.plan or not Path(args.plan).is_file():
        print(f"gpu_layouts: no plan at {args.plan}; run `scripts/gpu_check.sh --wheels` where the project is "
              "installed (it writes .whl/gpu_layouts_plan.json) and bring .whl/ along", file=sys.stderr)
        return 2
    else:
        plan = json.loads(Path(args.plan).read_text())
    device = torch.cuda.get_device_name(0) if gpu and not args.dry else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    rows = time_all(plan, out, budget_s=args.budget_s)
    judged, seconds = gpu and not args.dry, time.perf_counter() - t_start
    s = summary(rows, judged=judged)
    table = markdown(plan, rows, s, device, judged=judged, seconds=seconds)
    (out / "gpu_layouts.md").write_text(table)
    (out / "gpu_layouts.json").write_text(json.dumps(
        {"device": device, "torch": torch.__version__, "plan": {k: v for k, v in plan.items() if k != "layouts"},
         "rows": [{k: v for k, v in r.items() if k != "args"} for r in rows], "summary": s,
         "seconds": round(seconds, 1)}, indent=1))
    print(table)
    return 1 if any(not r.get("measured_s") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
