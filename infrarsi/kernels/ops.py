"""The kernel operators: the one table of what an op is beyond its folder.

An op is ``kernels/<op>/`` (``reference.py`` and its candidates) plus one entry here: its name and its memory
traffic per token, which ranks the ops when nothing measured names them (space.hot_ops). Everything else that lists
the ops (the loader, ``infrarsi kernels``, the minigpt adapter's knobs and its workload's ``--kernel`` help) reads
:data:`OPS`. Adding an op to a model still takes its call site in that model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Operator:
    name: str
    # Elements read + written per token in one step (forward and backward) by every call of the op in a model of
    # ``layers`` layers with dims {"hidden", "ffn_hidden", "heads", "vocab", "seq"}: a share of the step's memory
    # traffic, not a time.
    traffic: Callable[[Mapping[str, int], int], int]


OPERATORS: dict[str, Operator] = {o.name: o for o in (
    # 2 norms per layer + 1 final; x read and y written; x3 with backward
    Operator(name="rmsnorm", traffic=lambda d, layers: (2 * layers + 1) * 2 * d["hidden"] * 3),
    # gate and up read, out written, per layer; x3 with backward
    Operator(name="swiglu", traffic=lambda d, layers: layers * 3 * d["ffn_hidden"] * 3),
    # q and k, read and written, per layer; x2 with backward
    Operator(name="rope", traffic=lambda d, layers: layers * 2 * 2 * d["hidden"] * 2),
    # the logits read and their gradient written, once
    Operator(name="cross_entropy", traffic=lambda d, layers: 2 * d["vocab"] * 2),
    # as rmsnorm, plus the residual read
    Operator(name="add_rmsnorm", traffic=lambda d, layers: (2 * layers + 1) * 3 * d["hidden"] * 3),
)}
OPS: tuple[str, ...] = tuple(OPERATORS)
