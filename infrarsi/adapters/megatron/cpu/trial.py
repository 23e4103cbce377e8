"""How a trial of a CPU Megatron contract is started on this machine.

A CPU contract's launch runs ``launchers/pretrain_gpt_cpu.py`` (megatron-core's training loop with its CPU shims)
under ``torchrun``. :func:`cpu_trial` turns the launch the Megatron adapter emitted for a setting into the command
a trial runs, as the torchtitan adapter does for its CPU trials:

- ``torchrun`` becomes this interpreter's ``-m torch.distributed.run`` (the ``torchrun`` on PATH may belong to
  another environment), and a single-node launch that names no rendezvous gets ``--standalone`` (a free port per
  trial, so a trial left behind by a killed run cannot block the next);
- a setting the CPU launcher would refuse (:func:`~.gpt.cpu_refusal`: fp8, context parallelism, the
  alltoall dispatcher with expert TP > 1 on gloo, ...) is refused here, before anything starts;
- the memory cap is the contract's capacity per process (RLIMIT_DATA, set by the executor), and
  ``OMP_NUM_THREADS`` is 1 unless the launch sets it (torchrun's own default).

A GPU contract's launch is left exactly as emitted (it runs where its executor puts it).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ....errors import FrameworkRejected

if TYPE_CHECKING:
    from ....contract.model import Contract
    from ....trial.launch import LaunchSpec

_RDZV = ("--standalone", "--rdzv-endpoint", "--rdzv_endpoint", "--master-addr", "--master_addr", "--master-port",
         "--master_port", "--rdzv-backend", "--rdzv_backend")


def cpu_trial(spec: LaunchSpec, contract: Contract) -> LaunchSpec:
    """``spec`` (a LaunchSpec) as a CPU trial runs it; unchanged for a GPU contract."""
    if str(contract.hardware.kind).lower() != "cpu":
        return spec
    why = cpu_refusal_of(list(spec.argv))
    if why:
        raise FrameworkRejected(f"the CPU launcher refuses this setting: {why}")
    argv, env = list(spec.argv), dict(spec.env)
    if argv and os.path.basename(argv[0]) == "torchrun":
        launcher = argv[1:]
        argv[:1] = [sys.executable, "-m", "torch.distributed.run"]
        if spec.nodes == 1 and not any(a.split("=", 1)[0] in _RDZV for a in launcher):
            argv.insert(3, "--standalone")
    env.setdefault("OMP_NUM_THREADS", "1")
    return spec.model_copy(update={"argv": argv, "env": env,
                                   "memory_cap_bytes": contract.hardware.memory_capacity_bytes})


def cpu_refusal_of(argv: list[str]) -> str | None:
    """What the CPU launcher would refuse in the command ``argv`` (launcher, program, arguments), or None."""
    from .gpt import cpu_refusal
    from .model import MegatronArgsError, parse

    at = [i for i, a in enumerate(argv) if os.path.basename(a).startswith("pretrain_") and a.endswith(".py")]
    if not at:
        return None
    try:
        return cpu_refusal(parse(argv[at[-1] + 1:], strict=False).args)
    except MegatronArgsError as e:
        return str(e)
