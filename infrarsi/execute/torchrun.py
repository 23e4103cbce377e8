"""Multi-process launches through torchrun (``python -m torch.distributed.run``).

On the CPU the workers talk over gloo; ``--standalone`` gives each launch its own rendezvous on a free
port, so several trials can run side by side. ``TorchrunExecutor`` is the LocalExecutor with one
extra step: a spec with ``processes > 1`` whose argv is a plain ``python -m module ...`` or
``python script.py ...`` is wrapped into a torchrun line (an argv that already is one is left alone).

When a worker dies, torchrun itself exits 1 and prints a summary whose "Root Cause" block names the
failed rank and its exit code (``exitcode  : -9 (pid: 7238)  (SIGKILL)``). ``root_cause`` reads it
back so a trial whose worker was killed records that worker's signal.
"""

from __future__ import annotations

import re
from pathlib import Path

from .executor import Handle
from .local import LocalExecutor, resolve_argv
from ..trial import LaunchSpec

TORCHRUN_MODULE = "torch.distributed.run"


def is_torchrun(argv: list[str]) -> bool:
    """True for ``torchrun ...`` and ``python -m torch.distributed.run ...``."""
    if not argv:
        return False
    if Path(argv[0]).name == "torchrun":
        return True
    return len(argv) >= 3 and argv[1] == "-m" and argv[2] == TORCHRUN_MODULE


def torchrun_argv(argv: list[str], *, nproc_per_node: int, nnodes: int = 1) -> list[str]:
    """``python -m mod a b`` -> ``python -m torch.distributed.run --standalone --nproc-per-node N -m mod a b``.

    Only single-node standalone launches are built here; multi-node launches come from the adapter
    (they need a rendezvous endpoint) or from Slurm's srun."""
    if is_torchrun(argv):
        return list(argv)
    if nnodes != 1:
        raise ValueError(f"torchrun_argv builds single-node launches only (nnodes={nnodes}); "
                         f"give a multi-node spec its own rendezvous (--rdzv-endpoint) in the adapter")
    argv = resolve_argv(argv)
    if len(argv) < 2 or "python" not in Path(argv[0]).name:
        raise ValueError(f"cannot wrap {argv[:2]} in torchrun: expected `python -m module ...` or `python script.py ...`")
    head = [argv[0], "-m", TORCHRUN_MODULE, "--standalone", "--nproc-per-node", str(nproc_per_node)]
    return head + argv[1:]  # "-m mod ..." or "script.py ..." are both what torchrun takes


def wrap(spec: LaunchSpec) -> LaunchSpec:
    """The spec to start locally: wrapped in torchrun when it asks for several processes."""
    if spec.processes <= 1 or is_torchrun(spec.argv):
        return spec
    return spec.model_copy(update={"argv": torchrun_argv(spec.argv, nproc_per_node=spec.processes, nnodes=spec.nodes)})


_ROOT = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)
_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")


def root_cause(text: str) -> tuple[int, int] | None:
    """(rank, exit code) of the first failed worker from torchrun's summary; a negative exit code is
    minus the signal that killed it. None when the text holds no torchrun failure summary."""
    m = _ROOT.search(text)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = _FAILED.search(text)
    if m:
        return int(m.group(2)), int(m.group(1))
    return None


class TorchrunExecutor(LocalExecutor):
    """LocalExecutor that starts multi-process specs through torchrun."""

    kind = "local"  # same process model: resume and kill work exactly as for LocalExecutor

    def command_line(self, spec: LaunchSpec) -> list[str]:
        return super().command_line(wrap(spec))

    def command(self, spec: LaunchSpec, trial_dir: Path | None = None, **kw) -> list[str]:
        return super().command(wrap(spec), trial_dir, **kw)

    def submit(self, spec: LaunchSpec, trial_dir: Path, *, token: str) -> Handle:
        return super().submit(wrap(spec), trial_dir, token=token)
