"""A Megatron-LM launch, read: :class:`MegatronLaunch` and its readers (a command line, a script read through the
scripts it runs, a file). The writer (:mod:`.emit`), the equivalence check (:mod:`.equivalence`) and the adapter
(:mod:`.adapter`) import it; it imports none of them, so the three form no circle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...launch.bash import ScriptError
from ...launch.chain import Followed, follow
from ...launch.command import (KEPT, Launch, flag_variables, split_launcher, unfilled_flags, user_environment,
                               world_from_variables)
from ...transformer import data_parallel
from . import flags
from .args import _CHOICE_KNOBS, _ENTRY, _INT_KNOBS, MegatronLaunchError, _read_fixed, _read_setting, split_items

__all__ = ["MegatronLaunch", "parse_megatron", "parse_megatron_argv", "parse_megatron_file", "with_world"]


# --------------------------------------------------------------------------- parsed launch
@dataclass
class MegatronLaunch:
    """A Megatron-LM launch, read. ``launch`` holds launcher prefix, program and arguments verbatim."""

    launch: Launch
    env: dict[str, str]
    fixed: dict[str, Any]
    setting: dict[str, Any]
    world_size: int | None
    source: str = "<command>"
    expert_tensor_parallel: int | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # launch-level faults (a flag left without its value)
    warnings: list[str] = field(default_factory=list)  # flags that could not be checked (flags.check_flags)
    flags_from: str = ""  # where the program's known flags were read (flags.KnownFlags.source)
    known_flags: flags.KnownFlags | None = None  # the list the launch was judged against (None: not judged)
    device: str | None = None  # the contract's hardware.kind: fp8 recipes follow it
    read_with: dict[str, Any] = field(default_factory=dict)  # env, args, cwd the script was read with
    chain: Followed | None = None  # the scripts read to reach the launch command, with their texts
    knob_vars: dict[str, tuple[str, ...]] = field(default_factory=dict)  # TP -> (tensor_parallel,): `--tp $TP`

    @property
    def args(self) -> list[str]:
        return self.launch.args

    def argv(self) -> list[str]:
        return self.launch.argv()


def parse_megatron_argv(argv: list[str], *, env: Mapping[str, str] | None = None, source: str = "<command>",
                        script_vars: Mapping[str, Any] | None = None, sbatch: list[str] | None = None,
                        line: int | None = None, check_flags: bool = False, cwd: str | Path | None = None,
                        near: tuple[str | Path, ...] = ()) -> MegatronLaunch:
    """Read an expanded Megatron-LM command (launcher + pretrain script + arguments). ``check_flags``: the user's
    launch, so its flags get the verdict of :func:`.flags.check_flags` (program found from ``cwd`` or ``near``): a
    refusal raises, warnings are kept in ``warnings``."""
    launch = split_launcher(list(argv), env=dict(env or {}), sbatch=sbatch, line=line)
    if not launch.program or not (_ENTRY.search(launch.program[-1]) or launch.program[0] == "-m"):
        prog = " ".join(launch.program) or "(nothing)"
        raise MegatronLaunchError(f"{source}: expected a pretrain_*.py program after the launcher, found {prog}")
    items = split_items(launch.args)
    full_env = dict(env or {})
    fixed = _read_fixed(items)
    setting, etp = _read_setting(items, full_env, fixed)
    world = launch.world_size
    if world is None and script_vars is not None and ("torchrun" in launch.kinds or "srun" in launch.kinds):
        world = world_from_variables(dict(script_vars))  # e.g. --nproc_per_node $(nvidia-smi ...) but WORLD_SIZE=16
    if world:
        setting["data_parallel"] = data_parallel(world, setting["tensor_parallel"], setting["pipeline_parallel"],
                                                 setting["context_parallel"])
    out = MegatronLaunch(launch=launch, env=full_env, fixed=fixed, setting=setting, world_size=world,
                         source=source, expert_tensor_parallel=etp)
    if check_flags:  # the one place a launch's flags are judged: knobs, init, estimate and apply all read here
        verdict = flags.check_flags(launch.program[-1], launch.args, source=source, env=full_env, cwd=cwd, near=near)
        if verdict.refusal:  # the program's own parser would refuse the launch: neither estimated nor tuned
            raise MegatronLaunchError(verdict.refusal)
        out.warnings, out.flags_from, out.known_flags = list(verdict.warnings), verdict.known_from, verdict.known
    return out


def _claims(argv: list[str]) -> bool:
    """Whether a command is a Megatron-LM launch: its program (after the launcher) is a ``pretrain_*.py``."""
    try:
        la = split_launcher(argv)
    except Exception:  # noqa: BLE001 - a command we do not understand is not the launch
        return False
    return bool(la.program) and _ENTRY.search(la.program[-1]) is not None


def parse_megatron(text: str, *, path: str = "<command>", env: Mapping[str, str] | None = None,
                   args: list[str] | None = None, cwd: str | Path | None = None,
                   files: Mapping[str, str] | None = None) -> MegatronLaunch:
    """Read a Megatron-LM launch script or command line (text), through the scripts it runs (an sbatch file's
    ``srun bash train.sh``: :mod:`infrarsi.launch.chain`). ``env`` seeds the script's
    environment (default empty); ``args`` are the script's $1, $2, ...; ``cwd`` is where it is read from;
    ``files`` are texts read instead of the disk's for the chain's other scripts (an edit being read back).
    ``$PWD`` is kept as the user wrote it (``${PWD}``, resolved where the launch starts:
    :func:`infrarsi.launch.command.expand_kept`) unless ``env`` sets PWD (the contract's ``script_env``)."""
    start = {**user_environment(), "PWD": KEPT, **dict(env or {})}  # $HOME/... as the user's shell reads it
    try:
        fol = follow(text, path=path, env=start, args=args, cwd=None if cwd is None else str(cwd), claims=_claims,
                     files=files)
    except ScriptError as e:
        raise MegatronLaunchError(str(e)) from None
    cmd = fol.command
    if cmd is None:
        msg = (f"{path}: no `torchrun/srun/python ... pretrain_*.py` command found; "
               "the launch must call Megatron's pretrain script")
        if fol.top is not None and fol.top.exit_line is not None:
            msg += (f" (the script exits at line {fol.top.exit_line} before launching: "
                    "set the variables it checks there, e.g. with env=)")
        if fol.missed:
            msg += f" ({fol.missed[0]})"
        raise MegatronLaunchError(msg)
    res = fol.result
    near = tuple(dict.fromkeys(Path(p).parent for p in (fol.path, path) if p != "<command>"))
    out = parse_megatron_argv(cmd.argv, env=fol.env, source=path, script_vars=res.variables,
                              sbatch=fol.sbatch, line=cmd.line, check_flags=True, cwd=cwd, near=near)
    out.problems = unfilled_flags(fol.text, cmd.argv, res.variables, fol.args)
    out.read_with = {"env": dict(env or {}), "args": list(args or []), "cwd": None if cwd is None else str(cwd)}
    out.chain = fol
    out.knob_vars = flag_variables(list(fol.files.values()), _FLAG_KNOBS)
    return out


# knob flag -> the knobs it spells (a variable written after it carries their value)
_FLAG_KNOBS = {**{f: (k,) for f, k in _INT_KNOBS.items()}, **{f: (k[0],) for f, k in _CHOICE_KNOBS.items()}}


def parse_megatron_file(path: str | Path, *, env: Mapping[str, str] | None = None,
                        args: list[str] | None = None, cwd: str | Path | None = None) -> MegatronLaunch:
    p = Path(path)
    return parse_megatron(p.read_text(), path=str(p), env=env, args=args, cwd=cwd)


def with_world(parsed: MegatronLaunch, world: int) -> MegatronLaunch:
    """``parsed`` for ``world`` ranks, for a launch that does not say its world size: the data parallel degree
    follows (world / (tp x pp x cp)); changes ``parsed`` and returns it."""
    parsed.world_size = world
    st = parsed.setting
    st["data_parallel"] = data_parallel(world, st["tensor_parallel"], st["pipeline_parallel"], st["context_parallel"])
    return parsed
