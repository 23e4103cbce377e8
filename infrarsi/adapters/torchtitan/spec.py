"""torchtitan's :class:`~infrarsi.adapters.spec.FrameworkSpec`: ``-m torchtitan.train`` or ``run_train.sh``, a
``.toml`` job file, its profile rewrite."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...launch.command import split_launcher
from ...transformer import FULL_ACTIVE
from ..spec import FrameworkSpec
from .fidelity import counts as fidelity
from .spelling import SPELLING
from .pricing import PRICING

if TYPE_CHECKING:
    from ...trial import LaunchSpec


def claims(argv: list[str]) -> bool:
    """``python -m torchtitan.train`` or its ``run_train.sh``, after the launcher."""
    prog = split_launcher(argv).program
    return prog[:2] == ["-m", "torchtitan.train"] or (bool(prog) and Path(prog[0]).name == "run_train.sh")


def drafts(program: str, flags: Mapping[str, Any]) -> bool:
    """A program naming torchtitan, or ``--job.*`` flags."""
    return "torchtitan" in program or any(k.startswith("job.") for k in flags)


def rewrite_profile(argv: list[str], setting: Mapping[str, Any], env: Mapping[str, str],
                    cwd: str | Path) -> tuple[LaunchSpec, list[str]]:
    """The command with its overrides set to ``setting`` (catalog names; the command's own values for the rest; a
    knob torchtitan takes from the environment, ``intra_op_threads``, as its variable), and the rule violations."""
    from ...transformer import data_parallel
    from ..launcher import ProfileError
    from .adapter import emit_torchtitan, parse_torchtitan_argv, violations
    from .trial import ENV_KNOBS

    parsed = parse_torchtitan_argv(argv, env=dict(env), base_dir=cwd)
    env_set = {ENV_KNOBS[k]: str(int(v)) for k, v in setting.items() if k in ENV_KNOBS}  # e.g. OMP_NUM_THREADS
    setting = {k: v for k, v in setting.items() if k not in ENV_KNOBS}
    unknown = [k for k in setting if k not in parsed.setting]
    if unknown:
        raise ProfileError(f"profile names knob(s) {unknown} that torchtitan cannot set; known: "
                           f"{', '.join([*parsed.setting, *ENV_KNOBS])}")
    new = {**parsed.setting, **dict(setting)}
    if parsed.world_size and "data_parallel" not in setting:
        new["data_parallel"] = data_parallel(parsed.world_size, new["tensor_parallel"], new["pipeline_parallel"],
                                             new["context_parallel"])
    spec = emit_torchtitan(parsed, new)
    return spec.model_copy(update={"env": {**spec.env, **env_set}}), violations(parsed, new)


SPEC = FrameworkSpec(
    name="torchtitan", adapter="torchtitan:TorchtitanAdapter", claims=claims, job_suffixes=(".toml",),
    looks_for="a torchtitan one (-m torchtitan.train, run_train.sh, or a .toml job file)", drafts=drafts,
    rewrite_profile=rewrite_profile, fidelity=fidelity, flops_convention=FULL_ACTIVE, spelling=SPELLING, step_pricing=PRICING)
