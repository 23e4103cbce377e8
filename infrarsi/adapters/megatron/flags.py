"""Flags a launch's program refuses: Megatron-LM's ``pretrain_gpt.py`` parses its command line with argparse and
no ``ignore_unknown_args``, so a flag it does not know (a typo such as ``--micro-batch-sise``) ends the job at
start-up with "error: unrecognized arguments". A launch like that is refused when it is read, in one line naming
each flag and the nearest known one, rather than estimated or tuned as if the flag were not there.

The known flags are Megatron-LM's own (:mod:`.known_flags`, generated from its parser); the CPU launcher
(``launchers/pretrain_gpt_cpu.py``) parses strictly with :func:`infrarsi.workloads.megatron_model.build_parser`,
so its known flags are that parser's. Other programs (a user's ``pretrain_*.py`` may add flags of its own) are not
checked. A flag the program knows but this project does not model is not refused: the estimate lists it in its
notes.
"""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import PurePosixPath

from .args import split_items

MEGATRON_GPT = "pretrain_gpt.py"
CPU_LAUNCHER = "pretrain_gpt_cpu.py"


@cache
def known_flags(program: str) -> frozenset[str] | None:
    """The ``--`` flags ``program``'s parser accepts, or None when the program is not one whose parser is known."""
    name = PurePosixPath(program).name
    if name == MEGATRON_GPT:
        from .known_flags import MEGATRON_LM_FLAGS

        return MEGATRON_LM_FLAGS
    if name == CPU_LAUNCHER:
        from ...workloads.megatron_model import build_parser

        return frozenset(s for s in build_parser()._option_string_actions if s.startswith("--"))
    return None


def unrecognized(program: str, args: list[str]) -> list[str]:
    """Each flag of ``args`` that ``program``'s parser refuses, as "--flag (did you mean --nearest?)"."""
    known = known_flags(program)
    if known is None:
        return []
    out = []
    for it in split_items(list(args)):
        if it.flag and it.flag.startswith("--") and it.flag not in known and it.flag not in out:
            out.append(it.flag)
    return [f"{f} (did you mean {near[0]}?)" if (near := difflib.get_close_matches(f, known, n=1, cutoff=0.6))
            else f for f in out]


def refusal(program: str, args: list[str], *, source: str) -> str | None:
    """The one-line refusal of a launch whose program would exit on its flags, or None."""
    bad = unrecognized(program, args)
    if not bad:
        return None
    name = PurePosixPath(program).name
    return (f"{source}: {name} does not know {', '.join(bad)}: it would exit with \"unrecognized arguments\" "
            f"before training; fix the spelling or remove the flag")
