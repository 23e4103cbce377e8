"""A small, realistic recorded run for report and apply tests, written with the real writers.

What it writes under ``root`` (a stand-in for the user's repository)::

    root/minigpt-cpu.toml          contracts/minigpt-cpu.toml + a kernel knob (kernel_rmsnorm) in scope
    root/kernels/rmsnorm/<file>    the real candidate file, copied from the project's kernels/ (with
                                   ``generated=True``: to kernels/rmsnorm/generated/, as the run stage writes
                                   a candidate an LLM wrote; the contract then lists only "reference")
    root/run/                      a run directory, every record written through RunDir:
        the lock                   by write_lock (the real lock and hash)
        the trials                 by RunRecord.start/finish: doctor x3, search x12 (ok, OOM, crash,
                                   timeout), verify pairs for two candidates
        the noise profile          by doctor.noise.profile
        the search record          by the run stage's own writer (search.record.save_search) from a real Tuner
                                   told every doctor and search trial: proposals, kernel verdicts (sha256 of
                                   the copied file), priors, effects, prior revisions and the tuner's fit
        the verification           speedups from speedup.speedup_ci/promote on the verify trials

Step times and peaks come from a fixed log-linear law with seeded 2% (time) and 1% (memory) noise (the
law is below), so tests know the truth: threads 2 -26%, SDPA attention -22%, micro-batch 4 -8%, the
Triton RMSNorm -3% of time; micro-batch 8 +112% and SDPA attention -26% of peak memory; micro-batch 16
with unfused attention runs out of 0.75 GiB.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from pathlib import Path
from typing import Any

from ..adapters import get_adapter
from ..contract import contract_hash, write_lock
from ..rundir import RunDir
from ..kernels.space import extended_space
from ..doctor.noise import profile
from ..execute.record import RunRecord
from ..trial import Cost, Metrics, Proposal, Trial, TrialStatus
from ..models import TimeModel
from ..trial.prior import Prior
from ..search import Tuner, TunerConfig
from ..verify.speedup import promote, speedup_ci
from ..estimate.choice import memory_estimate
from ..search.record import save_search
from ..stages.run import outcome_of

PROJECT = Path(__file__).resolve().parents[2]
KERNEL = "kernels/rmsnorm/triton_rows.py"  # the candidate's file (what apply writes and the audit hashes)
KERNEL_SPEC = f"{KERNEL}@rows4"  # the kernel_rmsnorm value: one of the file's VARIANTS (kernels/loader.py)
# the same bytes, where the run stage writes them; named alone (its constants as written: those of @rows4)
GENERATED_KERNEL = "kernels/rmsnorm/generated/triton_gen.py"
MiB = 2**20

# log-scale effects relative to the baseline (mbs 2, unfused attention, 1 thread)
TIME_EFFECT = {("micro_batch_size", 1): 0.10, ("micro_batch_size", 4): -0.08, ("micro_batch_size", 8): -0.12,
               ("micro_batch_size", 16): -0.14, ("attention_backend", "auto"): -0.25, ("intra_op_threads", 2): -0.30,
               ("recompute_granularity", "selective"): 0.05, ("recompute_granularity", "full"): 0.25,
               ("bf16", True): 0.15, ("adam_impl", "fused"): -0.01, ("kernel_rmsnorm", KERNEL_SPEC): -0.03}
MEM_EFFECT = {("micro_batch_size", 1): -0.3, ("micro_batch_size", 4): 0.35, ("micro_batch_size", 8): 0.75,
              ("micro_batch_size", 16): 1.2, ("attention_backend", "auto"): -0.3,
              ("recompute_granularity", "selective"): -0.2, ("recompute_granularity", "full"): -0.4, ("bf16", True): -0.1}
BASE_S, BASE_MEM = 1.0, 400 * MiB

SEARCH = [  # (changes vs baseline, forced status or None, proposal kind)
    ({"micro_batch_size": 4}, None, "initial"),
    ({"attention_backend": "auto"}, None, "initial"),
    ({"intra_op_threads": 2}, None, "initial"),
    ({"micro_batch_size": 16}, None, "design"),  # OOM
    ({"micro_batch_size": 8, "attention_backend": "auto", "intra_op_threads": 2}, None, "acquisition"),
    ({"micro_batch_size": 16, "attention_backend": "auto", "recompute_granularity": "full"}, None, "paired"),
    ({"bf16": True, "attention_backend": "auto", "intra_op_threads": 2}, None, "acquisition"),
    ({"adam_impl": "fused", "micro_batch_size": 8}, TrialStatus.CRASH, "acquisition"),
    ({"recompute_granularity": "full", "micro_batch_size": 1}, TrialStatus.TIMEOUT, "design"),
    ({"micro_batch_size": 8, "attention_backend": "auto", "intra_op_threads": 2, "kernel_rmsnorm": KERNEL_SPEC}, None,
     "acquisition"),
    ({"adam_impl": "fused"}, None, "acquisition"),
    ({"micro_batch_size": 16, "intra_op_threads": 2}, None, "acquisition"),  # OOM
    ({"bf16": True}, None, "acquisition"),
    ({"bf16": True, "intra_op_threads": 2}, None, "acquisition"),
]
PRIORS = [
    Prior(knob="intra_op_threads", value=2, time_mean=-0.25, time_sd=0.15, source="offline",
          rationale="two cores: intra-op parallelism nearly halves matmul time"),
    Prior(knob="bf16", value=True, time_mean=-0.3, time_sd=0.12, mem_mean=-0.2, mem_sd=0.1, source="llm",
          rationale="bf16 halves activation bytes and doubles matmul throughput"),  # wrong on a CPU
    Prior(knob="micro_batch_size", value=16, mem_mean=1.0, mem_sd=0.3, source="offline",
          rationale="activations scale with the micro-batch"),
]


def _law(setting: dict[str, Any], table: dict, base: float) -> float:
    if setting.get("kernel_rmsnorm") == GENERATED_KERNEL:  # the same bytes and constants as KERNEL_SPEC: its effect
        setting = {**setting, "kernel_rmsnorm": KERNEL_SPEC}
    return base * math.exp(sum(v for (k, val), v in table.items() if setting.get(k) == val))


def write_recorded_run(root: str | Path, *, peak_flops: float | None = 1.0e12, scope_files: list[str] | None = None,
                       seed: int = 0, generated: bool = False) -> Path:
    """Write the recorded run under ``root``; returns the run directory (``root/run``). ``generated``: the
    winning RMSNorm candidate is one the run stage generated (kernels/rmsnorm/generated/, origin "generated"
    in its verdict), not one the contract lists."""
    root = Path(root)
    rng = random.Random(seed)
    kernel_file = GENERATED_KERNEL if generated else KERNEL
    kernel = GENERATED_KERNEL if generated else KERNEL_SPEC  # the setting's value
    (root / kernel_file).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT / KERNEL, root / kernel_file)
    listed = "reference" if generated else KERNEL_SPEC  # a generated candidate joins the domain for its run only
    text = (PROJECT / "contracts/minigpt-cpu.toml").read_text()
    text = text.replace("adam_impl = [\"foreach\", \"fused\"]", f"adam_impl = [\"foreach\", \"fused\"]\nkernel_rmsnorm = [\"{listed}\"]")
    if scope_files is not None:
        text = text.replace('files = ["kernels/**/*.py"]', f"files = {json.dumps(scope_files)}")
    if peak_flops:
        text = text.replace("memory_capacity_gib = 0.75", f"memory_capacity_gib = 0.75\npeak_flops = {peak_flops}")
    contract_path = root / "minigpt-cpu.toml"
    contract_path.write_text(text)
    run_dir = root / "run"
    contract, _ = write_lock(contract_path, run_dir)
    space = get_adapter("minigpt").knob_space(contract)
    if generated:  # as kernels.space.prepare extends it for the run
        space = extended_space(space, {"kernel_rmsnorm": ["reference", GENERATED_KERNEL]})
    baseline = space.complete(contract.baseline).to_dict()
    cap = contract.hardware.memory_capacity_bytes
    record = RunRecord(run_dir)
    from ..report.mfu import flops_per_step

    flops = flops_per_step(contract.workload.args, "minigpt")[0]

    def run_one(setting: dict[str, Any], role: str, forced: TrialStatus | None = None) -> Trial:
        t = record.start(setting, role=role)
        mem = _law(setting, MEM_EFFECT, BASE_MEM) * math.exp(rng.gauss(0, 0.01))
        step = _law(setting, TIME_EFFECT, BASE_S) * math.exp(rng.gauss(0, 0.02))
        wall = 8 * step + 5.0
        if forced is TrialStatus.CRASH:
            st, m, reason, ev = TrialStatus.CRASH, Metrics(), "exit code -11", ["Segmentation fault (core dumped)"]
            wall = 7.5
        elif forced is TrialStatus.TIMEOUT:
            st, m, reason, ev = TrialStatus.TIMEOUT, Metrics(), "still running after 300 s", ["killed after 300 s"]
            wall = 300.0
        elif mem > cap:
            st, m = TrialStatus.OOM, Metrics(peak_memory_bytes=None)
            reason, ev, wall = "out of memory", ["RuntimeError: DefaultCPUAllocator: can't allocate memory"], 6.0
        else:
            tf = flops / step / 1e12
            st = TrialStatus.OK
            m = Metrics(step_time_s=step, step_times_s=[step * 1.5, step * 1.1] + [step] * 4, peak_memory_bytes=mem,
                        tokens_per_s=4096 / step, tflops_per_device=tf, mfu=tf * 1e12 / peak_flops if peak_flops else None,
                        losses=[6.24, 6.1, 5.9, 5.7, 5.5, 5.3], phases_s={"forward": step * 0.3, "backward": step * 0.6})
            reason, ev = "", []
        now = time.time()
        return record.finish(t.model_copy(update={"status": st, "metrics": m, "reason": reason, "evidence": ev,
                                                  "cost": Cost(wall_s=wall, devices=1), "started_at": now - wall,
                                                  "finished_at": now}))

    doctor = [run_one(baseline, "doctor") for _ in range(3)]
    noise = profile([t.metrics.step_time_s for t in doctor], trial_ids=[t.id for t in doctor],
                    phases=[t.metrics.phases_s for t in doctor], reference_losses=doctor[0].metrics.losses,
                    baseline=baseline)
    RunDir(run_dir).write_noise(noise)

    proposals: dict[str, Proposal] = {}
    seen = list(doctor)
    for changes, forced, kind in SEARCH:
        s = {**baseline, **_named(changes, kernel)}
        ok = [t for t in seen if t.status is TrialStatus.OK]
        tm = TimeModel(space, priors=PRIORS, noise_cv=noise.cv).fit([t.setting for t in ok], [t.metrics.step_time_s for t in ok])
        mean, _ = tm.predict([s])
        t = run_one(s, "search", forced)
        proposals[str(t.id)] = Proposal(kind=kind, ei=0.05, p_oom=0.1, predicted_s=math.exp(float(mean[0])),
                                        savers=["recompute_granularity=full"] if kind == "paired" else [])
        seen.append(t)

    # the search record by the run stage's own writer, from a real Tuner told every trial, as `infrarsi run` does
    # (with the analytical memory estimate as the memory model's offset).
    tuner = Tuner(space, memory_capacity_bytes=cap, priors=PRIORS, seed=0, noise_cv=max(noise.cv, 1e-3),
                  config=TunerConfig(n_initial=3, mde=noise.mde), memory_estimate=memory_estimate(space, contract))
    for t in seen:
        tuner.tell(t.setting, outcome_of(t))
    sha = __import__("hashlib").sha256((root / kernel_file).read_bytes()).hexdigest()
    verdict = {"op": "rmsnorm", "verdict": "pass", "reasons": [], "sha256": sha}
    if generated:
        verdict.update(origin="generated", why="rmsnorm is 61% of the step (phase profile)")
    save_search(run_dir, tuner, PRIORS, proposals, "budget spent", {kernel: verdict}, [])

    verification: dict[str, Any] = {"repeats": 3, "mde": noise.mde, "baseline": baseline, "candidates": [],
                                    "rule": "promote when the 95% CI lower bound of the paired speedup > 1 + mde and the "
                                            "loss trace matches the baseline within the contract"}
    for changes in (_named(SEARCH[9][0], kernel), {"adam_impl": "fused"}):
        cand = {**baseline, **changes}
        pairs = [(run_one(baseline, "verify"), run_one(cand, "verify")) for _ in range(3)]
        sp = speedup_ci([a.metrics.step_time_s for a, _ in pairs], [b.metrics.step_time_s for _, b in pairs])
        passed, why = promote(sp, noise.mde)
        verification["candidates"].append({
            "setting": cand, "why": {"kind": "top"}, "trials": [[a.id, b.id] for a, b in pairs], **sp.to_dict(),
            "promoted": passed, "reason": why, "baseline_s": [a.metrics.step_time_s for a, _ in pairs],
            "candidate_s": [b.metrics.step_time_s for _, b in pairs],
            "peak_memory_bytes": max(b.metrics.peak_memory_bytes for _, b in pairs),
            "baseline_peak_memory_bytes": max(a.metrics.peak_memory_bytes for a, _ in pairs),
            "mfu": sorted(b.metrics.mfu or 0 for _, b in pairs)[1] or None,
            "baseline_mfu": sorted(a.metrics.mfu or 0 for a, _ in pairs)[1] or None})
    verification["contract_sha256"] = contract_hash(contract)
    verification["finished_at"] = time.time()
    RunDir(run_dir).write_verification(verification)
    return run_dir


def _named(changes: dict[str, Any], kernel: str) -> dict[str, Any]:
    """SEARCH's changes with the RMSNorm candidate named where this run keeps it."""
    return {k: kernel if v == KERNEL_SPEC else v for k, v in changes.items()}


_CACHE: dict[tuple, Path] = {}


def copy_run(src_root: str | Path, dst_root: str | Path) -> Path:
    """Copy a recorded run's root (contract, kernels, run dir) and point the copy's lock at the copied
    contract, so a test can edit either without touching the original. Returns the copy's run dir."""
    src_root, dst_root = Path(src_root), Path(dst_root)
    shutil.copytree(src_root, dst_root, dirs_exist_ok=True)
    run = RunDir(dst_root / "run")
    body = json.loads(run.lock_bytes() or b"{}")
    body["contract_path"] = str((dst_root / Path(body["contract_path"]).name).resolve())
    run.write_lock(body)  # the seal covers the contract, not its path
    return dst_root / "run"


def cached_recorded_run(base: str | Path, **kw: Any) -> Path:
    """One recorded run per keyword set per test session (under ``base``); returns its root. Copy it
    with :func:`copy_run` before changing anything."""
    key = tuple(sorted((k, json.dumps(v)) for k, v in kw.items()))
    if key not in _CACHE:
        root = Path(base) / f"recorded-{len(_CACHE)}"
        write_recorded_run(root, **kw)
        _CACHE[key] = root
    return _CACHE[key]


def write_verified_run(root: str | Path, contract_text: str, candidate: dict[str, Any], *, speedup: float = 1.25,
                       files: dict[str, str] | None = None, seed: int = 0) -> Path:
    """A minimal verified run for any adapter: the lock, three interleaved baseline/candidate pairs
    (candidate ``speedup`` times faster, 1% noise) and the verification; no search. ``files`` are
    written under ``root`` first (e.g. the launch script the contract names). Returns the run dir."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "contract.toml").write_text(contract_text)
    run_dir = root / "run"
    contract, _ = write_lock(root / "contract.toml", run_dir)
    adapter = get_adapter(contract.workload.adapter, base_dir=root)
    space = adapter.knob_space(contract)
    baseline = space.complete(contract.baseline).to_dict()
    cand = {**baseline, **candidate}
    record = RunRecord(run_dir)

    def one(setting: dict[str, Any], step: float) -> Trial:
        t = record.start(setting, role="verify")
        s = step * math.exp(rng.gauss(0, 0.01))
        return record.finish(t.model_copy(update={"status": TrialStatus.OK, "metrics": Metrics(step_time_s=s),
                                                  "cost": Cost(wall_s=10 * s, devices=contract.hardware.devices)}))

    pairs = [(one(baseline, 1.0), one(cand, 1.0 / speedup)) for _ in range(3)]
    sp = speedup_ci([a.metrics.step_time_s for a, _ in pairs], [b.metrics.step_time_s for _, b in pairs])
    passed, why = promote(sp, 0.03)
    body = {"repeats": 3, "mde": 0.03, "baseline": baseline, "rule": "promote when the 95% CI lower bound > 1 + mde",
            "candidates": [{"setting": cand, "why": {}, "trials": [[a.id, b.id] for a, b in pairs], **sp.to_dict(),
                            "promoted": passed, "reason": why, "baseline_s": [a.metrics.step_time_s for a, _ in pairs],
                            "candidate_s": [b.metrics.step_time_s for _, b in pairs]}],
            "contract_sha256": contract_hash(contract), "finished_at": time.time()}
    RunDir(run_dir).write_verification(body)
    RunDir(run_dir).write_search({"stop_reason": "budget spent", "kernel_verdicts": {}})
    return run_dir
