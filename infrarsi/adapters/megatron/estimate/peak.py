"""The pre-flight estimate for Megatron-LM: megatron-core's own model and training step, faked, per rank.

For a contract's launch and a setting, the adapter emits the launch exactly as a trial's (``MegatronAdapter.
launch``: the knob flags rewritten, megatron-core's ``TransformerConfig`` and process-group arithmetic checked, so
a setting estimated is one the adapter emits), and the program arguments of that launch are what
:mod:`.step` builds and steps, in a process of its own, as ranks of a fake process group of the job's
world size: the first pipeline stage, the last, and for MoE the stage with the most experts. The estimate is the
busiest of them; each one's peak by category is kept (``Estimate.per_rank``).

What the model is built from (see :mod:`infrarsi.adapters.megatron.cpu.model` for the flags and defaults read): the
launch's model and parallel flags; dtypes from ``--bf16``/``--fp16`` (fp32 main grads in bf16 unless
``--grad-reduce-in-bf16``, fp32 main params and Adam state in the optimizer, sharded over data parallel with
``--use-distributed-optimizer``); megatron-core's local layer spec, where Transformer Engine is absent (what it
changes is listed in that module and in each estimate's notes). Not estimated: context parallelism (its attention
is Transformer Engine's), fp8 (TE; estimated at bf16, said so), and anything a launch sets with flags this reader
does not model (listed in the notes).

What tensors do not show is added by :mod:`infrarsi.fakestep.overhead`: on the CPU (:mod:`.overhead`), the heap's
high-water mark over the tracked peak, computed from the step's storage sizes (glibc's mmap threshold), plus
constants fitted on real trials of the CPU training loop (the process, gloo's per-group threads and gradient
reduction, the heap's holes, MoE); on a GPU, the analytical 1.25 GiB (no GPU here to measure on).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ....fakestep.overhead import unseen_bytes
from ....fakestep.result import Estimate, EstimateError
from ....fakestep.track import Device
from . import overhead as om

if TYPE_CHECKING:
    from ....contract.model import Contract
    from ..adapter import MegatronAdapter, MegatronLaunch

STEP_MODULE = "infrarsi.adapters.megatron.estimate.step"
TIMEOUT_S = 1800.0
# Flags a launch may carry that change no tensor of a training step (data, tokenizer files, logging, checkpoints,
# launch plumbing): not listed as "not modelled" in an estimate's notes.
_NO_TENSORS = ("--data-path", "--vocab-file", "--merge-file", "--split", "--save", "--load", "--save-interval",
               "--eval-interval", "--eval-iters", "--tensorboard-dir", "--wandb-project", "--wandb-exp-name",
               "--data-cache-path", "--lr-decay-style", "--lr-warmup-iters", "--lr-warmup-fraction",
               "--lr-decay-iters", "--train-samples", "--no-load-optim", "--no-load-rng", "--ckpt-format",
               "--log-throughput", "--timing-log-level", "--distributed-timeout-minutes", "--rampup-batch-size",
               "--eod-mask-loss", "--no-masked-softmax-fusion", "--exit-interval", "--tokenizer-type",
               "--tokenizer-model", "--attention-backend", "--decoupled-lr", "--moe-router-load-balancing-type",
               "--moe-aux-loss-coeff", "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--init-method-std",
               "--no-position-embedding", "--use-mcore-models", "--empty-unused-memory-level", "--manual-gc")


def launch_argv(contract: Contract, setting: Mapping[str, Any], *,
                adapter: MegatronAdapter) -> tuple[list[str], int, MegatronLaunch]:
    """(pretrain_gpt.py arguments of the launch ``adapter`` emits, world size, the parsed launch)."""
    from ...base import FrameworkRejected
    from ..adapter import MegatronLaunchError

    ad = adapter
    try:
        parsed = ad.parsed(contract)
        spec = ad.trial_form(contract, ad.launch(contract, setting), setting)  # a trial's (the CPU launcher's refusals)
    except (FrameworkRejected, MegatronLaunchError) as e:
        raise EstimateError(f"the launch for this setting is refused: {e}") from None
    argv = list(spec.argv)
    prog = parsed.launch.program[-1]  # the pretrain script (or module): its arguments follow it
    at = len(argv) - 1 - argv[::-1].index(prog)
    world = int(parsed.world_size or contract.hardware.devices)
    return argv[at + 1:], world, parsed


PROGRESS = "progress: "  # the step process's stderr lines that say how far it is (:func:`run_step` passes them on)


class StepProcess:
    """:mod:`.step` in a process of its own (its shims and fake process group stay there), started
    before its job is known: it imports torch and megatron-core while the caller still reads the launch."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[4])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]),
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        self.proc = subprocess.Popen([sys.executable, "-m", STEP_MODULE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self.readers: list[threading.Thread] = []
        self.stdout = ""

    def send(self, job: dict[str, Any], progress: Callable[[str], None] | None) -> None:
        self.proc.stdin.write(json.dumps(job))
        self.proc.stdin.close()
        self.readers = [threading.Thread(target=self._read_stderr, args=(progress,), daemon=True),
                        threading.Thread(target=self._read_stdout, daemon=True)]
        for t in self.readers:
            t.start()

    def _read_stdout(self) -> None:
        self.stdout = self.proc.stdout.read()

    def _read_stderr(self, progress: Callable[[str], None] | None) -> None:
        for line in self.proc.stderr:  # as it comes: progress lines passed on, the rest kept for an error
            if line.startswith(PROGRESS):
                if progress is not None:
                    progress(line[len(PROGRESS):].strip())
            elif line.strip():
                self.tail.append(line.strip())

    def result(self, deadline: float) -> dict[str, Any]:
        try:
            self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            raise EstimateError(f"the fake step did not finish in {TIMEOUT_S:.0f} s") from None
        for t in self.readers:
            t.join(timeout=10)
        lines = [ln for ln in self.stdout.strip().splitlines() if ln.startswith("{")]
        if not lines:
            tail = (list(self.tail) or ["no output"])[-1]
            raise EstimateError(f"the fake step failed (exit {self.proc.returncode}): {tail}")
        out = json.loads(lines[-1])
        if "error" in out:
            raise EstimateError(f"megatron-core's fake step: {out['error']}")
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_steps(side_by_side: bool | None = None) -> list[StepProcess]:
    """The step processes of an "auto" job, started now: two side by side (rank 0; the other ranks) when two
    cores are idle (``side_by_side`` None: 1-minute load average + 1.5 <= cores), else one that steps the ranks in
    turn (on a busy machine a second process only competes for the same cores, and pays its own start-up)."""
    if side_by_side is None:
        cores = os.cpu_count() or 1
        side_by_side = hasattr(os, "getloadavg") and os.getloadavg()[0] + 1.5 <= cores
    return [StepProcess(), StepProcess()] if side_by_side else [StepProcess()]


def run_step(job: dict[str, Any], *, timeout_s: float = TIMEOUT_S, progress: Callable[[str], None] | None = None,
             started: list[StepProcess] | None = None) -> dict[str, Any]:
    """The fake step's result for ``job``. An "auto" job runs as two processes side by side (rank 0; the other
    ranks it names, from the model config), merged as one result; ``started``: those two, already started by
    :func:`start_steps`. ``progress`` gets each line they report while they run."""
    deadline = time.monotonic() + timeout_s
    procs = started or start_steps()
    if job.get("ranks", "auto") != "auto" or len(procs) == 1:
        for extra in procs[1:]:
            extra.stop()
        procs[0].send(job, progress)
        try:
            return procs[0].result(deadline)
        finally:
            procs[0].stop()
    try:
        for proc, half in zip(procs, ("auto-first", "auto-others")):
            proc.send({**job, "ranks": half}, progress)
        first, others = (proc.result(deadline) for proc in procs)
    finally:
        for proc in procs:
            proc.stop()
    return {**first, "ranks": first["ranks"] + others["ranks"]}


def estimate(contract: Contract, setting: Mapping[str, Any], *, adapter: MegatronAdapter, device: Device | None = None,
             unseen_gib: float | None = None, progress: Callable[[str], None] | None = None) -> Estimate:
    """The busiest estimated rank's peak for ``setting`` (completed against ``adapter``'s space); ``progress`` gets
    a line as each rank is built and stepped."""
    started = start_steps()  # they import torch and megatron-core while the launch is read and checked here
    try:
        ad = adapter
        full = ad.knob_space(contract).complete(dict(setting))
        # data parallel is derived from the world size (Megatron has no flag for it): the launch derives it
        argv, world, parsed = launch_argv(contract, {k: v for k, v in full.items() if k != "data_parallel"},
                                          adapter=ad)
        args = _refused_here(contract, ad, argv)
    except BaseException:
        for proc in started:
            proc.stop()
        raise
    out = run_step({"argv": argv, "world": world, "ranks": "auto"}, progress=progress, started=started)
    e = from_step(out, contract, argv=argv, world=world, unseen_gib=unseen_gib,
                  threads=int(full.get("intra_op_threads") or 1) if "intra_op_threads" in full else 1)
    # what the reader could not check of the launch's flags (flags.check_flags: no tree found), said here too
    return replace(e, notes=(*e.notes, *parsed.warnings)) if parsed.warnings else e


def _refused_here(contract: Contract, ad: MegatronAdapter, argv: list[str]):
    """The launch's arguments as read (Megatron-LM's derivations), or EstimateError for what is not estimated."""
    from ..cpu.model import MegatronArgsError, parse

    try:
        args = parse(argv, strict=False).args
    except MegatronArgsError as e:
        raise EstimateError(str(e)) from None
    if str(contract.hardware.kind).lower() == "cpu":
        from ..cpu.gpt import cpu_refusal

        why = cpu_refusal(args)
        if why:  # the CPU launcher refuses it: no trial of it could run, so it does not "fit"
            raise EstimateError(f"the CPU launcher refuses this setting: {why}")
    if args.context_parallel_size > 1:
        cp = args.context_parallel_size
        knob = "context_parallel" in ad.knob_space(contract)
        fix = ("estimate with --set context_parallel=1" if knob else
               "context_parallel is not a knob of this contract: estimate a copy of the launch without "
               f"--context-parallel-size {cp}")
        raise EstimateError(f"context parallelism (--context-parallel-size {cp}) is not estimated: its attention is "
                            f"Transformer Engine's, which megatron-core's local spec lacks; {fix} (each rank then "
                            f"holds the full sequence: an upper bound of its activations, {cp}x the CP share)")
    return args


def from_step(out: dict[str, Any], contract: Contract, *, argv: list[str], world: int, unseen_gib: float | None = None,
              threads: int = 1) -> Estimate:
    """The Estimate for a fake step's result (the rank with the highest peak, every rank kept)."""
    from ..cpu.model import fused_attention, parse

    args = parse(argv, strict=False).args
    per_rank = []
    for r in out["ranks"]:
        tracked = {k: int(v) for k, v in r["peak"].items() if v}
        transient = tracked.get("Activation", 0) + tracked.get("Temp", 0)
        reduced = reduced_bytes(r, tracked, bool(args.use_distributed_optimizer))
        unseen, source = unseen_bytes(contract, threads=threads, bf16=bool(args.bf16), transient_bytes=transient,
                                      override_gib=unseen_gib, rank=partial(cpu_rank, r, reduced))
        per_rank.append({**r, "tracked": tracked, "unseen_bytes": unseen, "unseen_source": source,
                         "peak_bytes": sum(tracked.values()) + unseen})
    top = max(per_rank, key=lambda r: r["peak_bytes"])
    tp, pp, cp = (args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.context_parallel_size)
    layout = {"world": world, "tp": tp, "pp": pp, "vp": args.virtual_pipeline_model_parallel_size or 1, "cp": cp,
              "dp": world // (tp * pp * cp), "ep": args.expert_model_parallel_size,
              "sequence_parallel": bool(args.sequence_parallel), "micro_batch": args.micro_batch_size,
              "micro_batches": top["micro_batches"], "recompute": args.recompute_granularity or "none",
              "distributed_optimizer": bool(args.use_distributed_optimizer),
              "dtype": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
              "attention": "fused (flash)" if fused_attention(args) else "local (unfused)",
              "rank": top["rank"], "pp_rank": top["pp_rank"]}
    if args.num_experts:
        layout.update(experts=args.num_experts, top_k=args.moe_router_topk, dispatcher=args.moe_token_dispatcher_type,
                      local_experts=top["local_experts"])
    return Estimate(framework="megatron", world_size=world, layout=layout, tracked=top["tracked"],
                    unseen_bytes=top["unseen_bytes"], unseen_source=top["unseen_source"], step_time_s=None,
                    step_time_note="no roofline time for Megatron (the fake step runs in a process of its own)",
                    wall_s=sum(r["wall_s"] for r in per_rank), notes=tuple(_notes(args, out)),
                    per_rank=tuple(_rank_row(r) for r in per_rank))


def cpu_rank(r: Mapping[str, Any], reduced: float) -> tuple[float, str]:
    """(bytes, where they come from) no tracker sees in a rank ``r`` of the fake step (its process_groups,
    local_experts and heap) run as the megatron-core CPU training loop: overhead.py's measured model;
    ``reduced`` is reduced_bytes() of the rank."""
    groups, experts = int(r.get("process_groups", 0)), int(r.get("local_experts", 0))
    total, parts = om.unseen(process_groups=groups, local_experts=experts, heap=r.get("heap"), reduced_bytes=reduced)
    return total, om.describe(parts, process_groups=groups, local_experts=experts)


def reduced_bytes(r: Mapping[str, Any], tracked: Mapping[str, int], distributed_optimizer: bool) -> int:
    """The gradient buffer a rank reduce-scatters over data parallel with the distributed optimizer (else 0)."""
    return int(tracked.get("Gradient", 0)) if distributed_optimizer and int(r.get("data_parallel", 1)) > 1 else 0


def _rank_row(r: dict[str, Any]) -> dict[str, Any]:
    return {"rank": r["rank"], "pp_rank": r["pp_rank"], "why": ", ".join(r.get("why") or []) or "asked",
            "tracked": r["tracked"], "unseen_bytes": r["unseen_bytes"], "peak_bytes": r["peak_bytes"],
            "params": r["params"], "layers": r["layers"], "moe_layers": r["moe_layers"],
            "local_experts": r["local_experts"], "micro_batches_run": r["micro_batches_run"],
            "micro_batches": r["micro_batches"], "process_groups": r.get("process_groups", 0), "heap": r.get("heap"),
            "data_parallel": r.get("data_parallel", 1), "wall_s": r["wall_s"]}


def _notes(args, out: dict[str, Any]) -> list[str]:
    from ..cpu.model import fused_attention

    notes = ["megatron-core's local layer spec (no Transformer Engine here): norms as separate modules keeping what "
             "TE's fused norms keep, fusions eager, torch's fused AdamW for TE's FusedAdam"]
    if fused_attention(args):
        notes.append(f"--attention-backend {args.attention_backend}: a flash attention core (Q, K, V, output and "
                     "fp32 log-sum-exp kept), as TE's flash/cuDNN kernels")
    else:
        notes.append(f"--attention-backend {args.attention_backend}: megatron-core's DotProductAttention (s x s "
                     "scores and probabilities kept)")
    if args.fp8_format or args.fp8_recipe:
        notes.append("fp8 (Transformer Engine) is not modelled: estimated at the bf16 it runs in otherwise")
    if args.moe_grouped_gemm:
        notes.append("--moe-grouped-gemm estimated as megatron-core's SequentialMLP experts (same weights)")
    if args.num_experts:
        notes.append("MoE: tokens routed evenly (every expert gets tokens x top-k / experts); a skewed router "
                     "takes more")
    if args.multi_latent_attention:
        notes.append("MLA: V padded to the Q/K head size inside the flash core (torch's kernel needs one size)")
    odd = [f for f in out.get("unknown_flags", []) if f not in _NO_TENSORS]
    if odd:
        notes.append(f"flags not modelled (their memory is not estimated): {' '.join(odd)}")
    notes.append(f"vocabulary: {out.get('vocab')}, padded to {out.get('padded_vocab')}")
    return notes
