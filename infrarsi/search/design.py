"""Initial design: k diverse, valid settings drawn from the most promising ones -- not a walk from one incumbent.

Promising = best predicted step time under the priors (and the models, when the baseline is already
told) among the settings likely to fit in memory. Diverse = greedy maximin in the one-hot feature
space: each next pick is the promising setting farthest from everything already chosen or tried.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..knobs import Setting


def maximin(
    x_pool: np.ndarray,
    score: np.ndarray,
    k: int,
    *,
    x_taken: np.ndarray | None = None,
    top_fraction: float = 0.25,
) -> list[int]:
    """Indices of ``k`` pool rows: from the best ``top_fraction`` by ``score`` (lower is better), greedily the
    one farthest (L1 in feature space, ties broken by score) from the rows already taken.

    x_pool: (n, p) encodings; score: (n,); x_taken: (m, p) encodings of settings already chosen or tried."""
    n = len(x_pool)
    if n == 0 or k <= 0:
        return []
    m = max(k, int(np.ceil(top_fraction * n)))
    order = np.argsort(score, kind="stable")[:m]
    chosen: list[int] = []
    if x_taken is None or len(x_taken) == 0:
        chosen.append(int(order[0]))  # start from the most promising
        dist = np.abs(x_pool[order] - x_pool[order[0]]).sum(axis=1)
    else:
        dist = np.min(np.abs(x_pool[order][:, None, :] - x_taken[None, :, :]).sum(axis=2), axis=1)
    rank = np.arange(len(order)) / max(1, len(order))  # small tie-breaker toward better scores
    while len(chosen) < min(k, len(order)):
        val = dist - 1e-3 * rank
        val[[int(np.flatnonzero(order == c)[0]) for c in chosen]] = -np.inf
        j = int(np.argmax(val))
        if not np.isfinite(val[j]):
            break
        chosen.append(int(order[j]))
        dist = np.minimum(dist, np.abs(x_pool[order] - x_pool[order[j]]).sum(axis=1))
    return chosen


def dedupe(settings: Sequence[Setting]) -> list[Setting]:
    return list(dict.fromkeys(settings))
