"""Megatron-LM's :class:`~infrarsi.adapters.spec.FrameworkSpec`: a ``pretrain_*.py`` program, its profile rewrite."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...launch.command import split_launcher
from ...transformer import CAUSAL_MATMULS
from ..spec import FrameworkSpec
from .fidelity import counts as fidelity
from .spelling import SPELLING
from .pricing import PRICING

if TYPE_CHECKING:
    from ...trial import LaunchSpec


def claims(argv: list[str]) -> bool:
    """A ``pretrain_*.py`` program (pretrain_gpt.py, pretrain_mamba.py, ...), after its launcher."""
    prog = split_launcher(argv).program
    return bool(prog) and Path(prog[-1]).name.startswith("pretrain_") and prog[-1].endswith(".py")


def rewrite_profile(argv: list[str], setting: Mapping[str, Any], env: Mapping[str, str],
                    cwd: str | Path) -> tuple[LaunchSpec, list[str]]:
    """The command with its knob flags and environment set to ``setting`` (catalog names; the command's own values
    for the rest), and the rule violations of the result."""
    from ...transformer import data_parallel
    from ..launcher import ProfileError
    from .adapter import emit_megatron, parse_megatron_argv, violations

    parsed = parse_megatron_argv(argv, env=dict(env))
    unknown = [k for k in setting if k not in parsed.setting]
    if unknown:
        raise ProfileError(f"profile names knob(s) {unknown} that Megatron cannot set; known: {', '.join(parsed.setting)}")
    new = {**parsed.setting, **dict(setting)}
    if parsed.world_size and "data_parallel" not in setting:
        new["data_parallel"] = data_parallel(parsed.world_size, new["tensor_parallel"], new["pipeline_parallel"],
                                             new["context_parallel"])
    return emit_megatron(parsed, new), violations(parsed, new, core=False)


SPEC = FrameworkSpec(
    name="megatron", title="Megatron", adapter="megatron:MegatronAdapter", claims=claims,
    looks_for="a Megatron-LM command (torchrun/srun/python ... pretrain_gpt.py)",
    drafts_any=True,  # a launch read literally that nothing else claims is taken for Megatron's (the common case)
    rewrite_profile=rewrite_profile, fidelity=fidelity, spelling=SPELLING, step_pricing=PRICING,
    flops_convention=replace(CAUSAL_MATMULS, text="Megatron-style: " + CAUSAL_MATMULS.text))
