"""How a torchtitan trial is started on this machine, and the knobs only a trial adds.

:func:`trial_spec` turns the launch :func:`~.torchtitan.emit_torchtitan` wrote for a setting into the
command a trial runs:

- For a CPU contract on a machine where torch finds no accelerator, or wherever kernel patches are asked
  for, the program ``-m torchtitan.train`` becomes ``launchers/torchtitan_cpu.py`` (the same arguments;
  without an accelerator it installs the four fixes torchtitan 0.2.2 needs to start, and it installs
  kernel patches before torchtitan is imported). A GPU contract without patches keeps its launch exactly
  as emitted (it runs where its executor puts it, e.g. a Slurm node).
- CPU contracts only: ``torchrun`` becomes this interpreter's ``-m torch.distributed.run`` (the ``torchrun`` on PATH may
  belong to another environment), and a single-node launch that names no rendezvous gets
  ``--standalone`` (a free port per trial, so a trial left behind by a killed run cannot block the next).
- The environment gets the memory cap (RLIMIT_DATA per process, set by the executor), ``HF_*_OFFLINE``
  (the tokenizer and dataset are local; nothing may come from a hub) and the thread count.

Knobs a torchtitan trial adds to the catalog's (:func:`runtime_knobs`; HSDP's ``data_parallel_replicate`` is a
knob of every torchtitan launch, :func:`~.adapter.replicate_knob`):

- ``intra_op_threads``: ``OMP_NUM_THREADS`` per process (torchrun sets 1 when it is unset). More threads
  than cores is allowed: it is slow, not wrong, and the tuner measures it.
- ``kernel_<op>``: a verified kernel candidate for an op the patch hook can replace
  (``launchers/torchtitan_patches.py``), present when the contract's scope lists candidates for it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...contract.model import Contract
from ...trial import LaunchSpec
from ...knobs import Knob, KnobSpace

ROOT = Path(__file__).resolve().parents[3]
LAUNCHER = ROOT / "launchers" / "torchtitan_cpu.py"
PATCHABLE_OPS = ("rmsnorm",)  # ops launchers/torchtitan_patches.py can replace inside torchtitan's llama3
TT_PROGRAM = ["-m", "torchtitan.train"]
_RDZV = ("--standalone", "--rdzv-endpoint", "--rdzv_endpoint", "--master-addr", "--master_addr", "--master-port",
         "--master_port", "--rdzv-backend", "--rdzv_backend")


def has_accelerator() -> bool:
    """True where torch finds CUDA, ROCm, XPU or another accelerator (torchtitan then runs unchanged)."""
    import torch._utils

    return torch._utils._get_available_device_type() is not None


# Knobs torchtitan takes from the environment, not from a flag or its TOML: knob -> variable (trials and
# infrarsi-launch --profile set them the same way)
ENV_KNOBS = {"intra_op_threads": "OMP_NUM_THREADS"}


def runtime_knobs(contract: Contract) -> list[Knob]:
    """The knobs above; kernel knobs only for ops the contract's scope lists candidates for."""
    out = [
        Knob(name="intra_op_threads", kind="int", domain=(1, 2, 4, 8, 16), default=1, group="runtime",
             doc="intra-op threads per process (torchrun's default is 1)"),
    ]
    for op in PATCHABLE_OPS:
        name = f"kernel_{op}"
        if name in contract.scope.knobs:
            dom = tuple(dict.fromkeys(["reference", *contract.scope.knobs[name]]))
            out.append(Knob(name=name, kind="categorical", domain=dom, default="reference", group="kernel",
                            doc=f"a verified kernel candidate replacing torchtitan's {op}"))
    return out


def with_runtime_knobs(space: KnobSpace, contract: Contract) -> KnobSpace:
    """``space`` plus :func:`runtime_knobs`."""
    have = set(space.names)
    knobs = [*space.knobs, *[k for k in runtime_knobs(contract) if k.name not in have]]
    return KnobSpace(knobs, space.constraints, space.derived)


def patches_of(setting: Mapping[str, Any]) -> dict[str, str]:
    """op -> candidate file: the setting's ``kernel_<op>`` knobs that name a candidate."""
    out = {}
    for op in PATCHABLE_OPS:
        v = setting.get(f"kernel_{op}", "reference")
        if v and v != "reference":
            out[op] = str(v)
    return out


DUMP = "--job.dump_folder"


def dump_folder_in_trial(argv: list[str]) -> list[str]:
    """``argv`` with torchtitan's ``job.dump_folder`` (checkpoints, TensorBoard, profiles and traces are written
    under it) in the trial's directory, ``RUN_DIR/trials/<n>/outputs`` (``spec.TRIAL_DIR``, filled in at launch):
    the repository is read-only to a trial. An override already there gets the new value; else one is added
    before the activation-checkpoint subcommand, which stays last."""
    from ...trial import OUTPUTS, TRIAL_DIR
    from .configs import _SUBCOMMAND

    where = f"{TRIAL_DIR}/{OUTPUTS}"
    out = list(argv)
    for i, tok in enumerate(out):
        flag, eq, _ = tok.partition("=")
        if flag.replace("-", "_") == "--job.dump_folder":
            if eq:
                out[i] = f"{flag}={where}"
            elif i + 1 < len(out):
                out[i + 1] = where
            return out
    at = next((i for i, t in enumerate(out) if _SUBCOMMAND.match(t)), len(out))
    return out[:at] + [DUMP, where] + out[at:]


def _program_at(argv: list[str]) -> int | None:
    for i in range(len(argv) - 1):
        if argv[i:i + 2] == TT_PROGRAM:
            return i
    return None


def _own_program(contract: Contract, setting: Mapping[str, Any]) -> bool:
    """Whether a trial runs ``launchers/torchtitan_cpu.py`` for ``-m torchtitan.train`` (kernel patches; a CPU
    contract on a machine without an accelerator)."""
    cpu = contract.hardware.kind.lower() == "cpu"
    return bool(patches_of(setting)) or (cpu and not has_accelerator())


def _cpu_launcher(argv: list[str], nodes: int, launcher: list[str]) -> list[str]:
    """``argv`` with a CPU trial's launcher: ``torchrun`` as this interpreter's ``-m torch.distributed.run``, and
    ``--standalone`` for a single node whose ``launcher`` (its options, as emitted) names no rendezvous."""
    argv = list(argv)
    if argv and os.path.basename(argv[0]) == "torchrun":
        argv[:1] = [sys.executable, "-m", "torch.distributed.run"]
    if (argv[1:3] == ["-m", "torch.distributed.run"] and nodes == 1
            and not any(a.split("=", 1)[0] in _RDZV for a in launcher)):
        argv.insert(3, "--standalone")
    return argv


def own_launcher(spec: LaunchSpec, contract: Contract, setting: Mapping[str, Any]) -> bool:
    """Whether a trial runs the emitted launch ``spec`` with another launcher or program than the user's (what
    :func:`trial_spec` rewrites): such a launch cannot be written into the user's own files."""
    argv = list(spec.argv)
    at = _program_at(argv)
    if at is not None and _own_program(contract, setting):
        return True
    cpu = contract.hardware.kind.lower() == "cpu"
    return cpu and _cpu_launcher(argv, spec.nodes, argv[:at] if at is not None else argv) != argv


def trial_spec(spec: LaunchSpec, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec:
    """The emitted launch, as a trial on this machine runs it (see the module docstring)."""
    argv = list(spec.argv)
    env = dict(spec.env)
    ops = patches_of(setting)
    env.pop("INFRARSI_PATCHES", None)
    if ops:
        env["INFRARSI_PATCHES"] = json.dumps(ops, sort_keys=True)
    for knob, var in ENV_KNOBS.items():
        if setting.get(knob) is not None:
            env[var] = str(int(setting[knob]))
    cpu = contract.hardware.kind.lower() == "cpu"
    at = _program_at(argv)
    if at is not None and _own_program(contract, setting):
        if not LAUNCHER.is_file():
            raise FileNotFoundError(f"the torchtitan launcher {LAUNCHER} is missing; run from a checkout of the project")
        argv[at:at + 2] = [str(LAUNCHER)]
    if not cpu:  # a GPU job runs where its executor puts it (a Slurm node): its launcher and environment stay
        return spec.model_copy(update={"argv": argv, "env": env})
    argv = _cpu_launcher(argv, spec.nodes, spec.argv[:at] if at is not None else spec.argv)  # options as emitted
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    cap = contract.hardware.memory_capacity_bytes  # RLIMIT_DATA per process, set by the executor
    return spec.model_copy(update={"argv": argv, "env": env, "memory_cap_bytes": cap})
