"""Benchmark: what the memory model's offset buys a real search -- the same search with the pre-flight estimate (the
fake step of ``infrarsi estimate``) and with the analytical estimate (``priors/offline.py``), over seeds.

One ``infrarsi init`` + ``infrarsi doctor`` of the contract (its baseline and noise are shared by every run), then for
each seed and offset a copy of that run directory searched by ``infrarsi run --seed S`` with
``INFRARSI_MEMORY_OFFSET=OFFSET`` and a fresh experience bank. Each run is stopped once its search has finished
(its stages record says so): what is measured is the search (OOM trials, the best step time and the search trial that
found it, the P(OOM) each trial was priced at); the re-verification would only re-measure its best
(``infrarsi run --run-dir DIR`` resumes it). Prints one row per run and one line per offset.

    .venv/bin/python scripts/bench_offset_tune.py                               # contracts/torchtitan-cpu.toml
    .venv/bin/python scripts/bench_offset_tune.py --seeds 0 1 2 --offsets estimate analytical --work .infrarsi/offsets
    .venv/bin/python scripts/bench_offset_tune.py --memory-cap-gib 2.0 --work .infrarsi/offsets-2g   # a cap that binds

Run it on a quiet machine: every trial is a real training run (torchtitan: ~20 s each, ~3 min per search here).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infrarsi.errors import RecordError  # noqa: E402
from infrarsi.rundir import RunDir  # noqa: E402
from infrarsi.trial.status import TrialStatus  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "infrarsi.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _search_done(run_dir: Path) -> bool:
    try:
        return RunDir(run_dir).stages().search is not None
    except (OSError, RecordError):  # read while it is being written: next time
        return False


def search_only(run_dir: Path, seed: int, offset: str, bank: Path) -> tuple[float, str]:
    """``infrarsi run`` until its search has finished: (wall seconds, its output)."""
    env = {**os.environ, "INFRARSI_MEMORY_OFFSET": offset, "INFRARSI_BANK": str(bank)}
    t0 = time.monotonic()
    p = _cli("run", "--run-dir", str(run_dir), "--seed", str(seed), env=env)
    while p.poll() is None and not _search_done(run_dir):
        time.sleep(2)
    wall = time.monotonic() - t0
    if p.poll() is None:  # the search is recorded; end the re-verification it went on to (the whole session)
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    return wall, p.stdout.read() if p.stdout else ""


def search_rows(run_dir: Path) -> list[dict]:
    """The run's search trials, in order: status, median step (s), peak (bytes), the P(OOM) it was proposed at."""
    rows = []
    run = RunDir(run_dir)
    for i in run.trial_ids():
        t = run.trial(i)
        if t is None or t.role != "search":
            continue
        prop = run.proposal(i) or {}
        rows.append({"id": t.id, "status": t.status, "step_s": t.metrics.step_time_s,
                     "peak": t.metrics.peak_memory_bytes, "p_oom": prop.get("p_oom"), "setting": t.setting})
    return rows


def capped_copy(contract: Path, cap_gib: float, dest: Path) -> Path:
    """``contract`` with ``memory_capacity_gib = cap_gib`` and its launch file made absolute, written to ``dest``."""
    if not cap_gib > 0:
        raise SystemExit(f"--memory-cap-gib {cap_gib}: give a positive number of GiB (e.g. 2.0)")
    lines, seen = [], False
    for line in contract.read_text().splitlines():
        key = line.split("=", 1)[0].strip()
        if key == "memory_capacity_gib":
            line, seen = f"memory_capacity_gib = {cap_gib}", True
        elif key == "launch" and "=" in line:
            rel = line.split("=", 1)[1].strip().strip('"')
            line = f'launch = "{(contract.parent / rel).resolve()}"'
        lines.append(line)
    if not seen:
        raise SystemExit(f"{contract}: no memory_capacity_gib line under [hardware] to change")
    dest.write_text("\n".join(lines) + "\n")
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contract", default="contracts/torchtitan-cpu.toml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--offsets", nargs="+", default=["estimate", "analytical"], choices=("estimate", "analytical"))
    ap.add_argument("--work", type=Path, default=Path(".infrarsi/offsets"), help="run directories go here")
    ap.add_argument("--memory-cap-gib", type=float, default=None,
                    help="run a copy of the contract with this [hardware] memory_capacity_gib (a cap that binds)")
    args = ap.parse_args(argv)
    work = (ROOT / args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    contract = args.contract
    if args.memory_cap_gib is not None:
        contract = str(capped_copy(ROOT / args.contract, args.memory_cap_gib, work / "contract.toml"))
    base = work / "doctor"
    if RunDir(base).noise() is None:
        shutil.rmtree(base, ignore_errors=True)
        env = {**os.environ, "INFRARSI_BANK": str(work / "doctor.bank.sqlite")}
        for step in (("init", contract, "--run-dir", str(base)), ("doctor", "--run-dir", str(base))):
            p = _cli(*step, env=env)
            out, _ = p.communicate()
            if p.returncode:
                print(out, file=sys.stderr)
                print(f"error: infrarsi {step[0]} failed (exit {p.returncode}); see above", file=sys.stderr)
                return 1
    print("| offset | seed | search trials | OOM | best s/step (search trial) | P(OOM) of the best | search wall |")
    print("|---|---:|---:|---:|---|---:|---:|")
    summary: dict[str, list[tuple[int, float, int]]] = {}
    for seed in args.seeds:
        for off in args.offsets:
            run_dir = work / f"{off}-{seed}"
            shutil.rmtree(run_dir, ignore_errors=True)
            shutil.copytree(base, run_dir, symlinks=True)
            bank = work / f"{off}-{seed}.bank.sqlite"
            bank.unlink(missing_ok=True)
            wall, out = search_only(run_dir, seed, off, bank)
            rows = search_rows(run_dir)
            ok = [(r["step_s"], i + 1, r) for i, r in enumerate(rows) if r["status"] is TrialStatus.OK and r["step_s"]]
            if not ok:
                print(out, file=sys.stderr)
                print(f"| {off} | {seed} | {len(rows)} | - | no trial ran | - | {wall:.0f} s |")
                continue
            best_s, at, best = min(ok, key=lambda x: x[0])
            ooms = sum(r["status"] is TrialStatus.OOM for r in rows)
            p = best["p_oom"]
            print(f"| {off} | {seed} | {len(rows)} | {ooms} | {best_s:.3f} (trial {at}) | "
                  f"{'-' if p is None else f'{p:.2f}'} | {wall:.0f} s |", flush=True)
            summary.setdefault(off, []).append((ooms, best_s, at))
    for off, xs in summary.items():
        print(f"# {off}: OOM trials {sum(x[0] for x in xs)} over {len(xs)} runs; best s/step median "
              f"{statistics.median(x[1] for x in xs):.3f}; search trial of the best, median {statistics.median(x[2] for x in xs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
