"""torchtitan 0.3's own config check, run in a process of its own.

torchtitan 0.2 and 0.3 share one package name, so 0.3 lives in a target directory of its own (see
:data:`infrarsi.adapters.torchtitan.check.TORCHTITAN03_ENV`) and is imported here, never beside 0.2. Reads
one JSON list of jobs ``[[args, world_size], ...]`` on stdin and writes one JSON list of results, each the
list of torchtitan's refusals ([] = accepted): ``ConfigManager().parse_args(args)`` (tyro, the config
function, every config class's ``__post_init__``) and then ``ParallelDims.from_config``. With ``--config`` each
result is ``{"refused": [...], "config": {...}}``, the parsed config flattened to ``"section.field"`` values
(:func:`infrarsi.adapters.equivalence.flatten`) plus ``derived.dp_shard``, the shard degree ParallelDims
resolved, for the equivalence check.

    PYTHONPATH=<target> python -m infrarsi.adapters.torchtitan.v03 [--config] < jobs.json
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sys
import warnings

_BOX = re.compile(r"[\u2500-\u257f]+|-{3,}")


def _one(args: list[str], world: int | None, *, config: bool = False):
    from torchtitan.config import ConfigManager

    if config:
        from infrarsi.adapters.equivalence import flatten

    def answer(refused: list[str], flat: dict | None = None):
        return {"refused": refused, "config": flat} if config else refused

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = ConfigManager().parse_args(list(args))
    except SystemExit:
        text = " ".join(ln for ln in (_BOX.sub("", x).strip() for x in (err.getvalue() + out.getvalue()).splitlines())
                        if ln and not ln.startswith("For full helptext"))
        return answer([f"torchtitan 0.3 ConfigManager: {text or 'the command line was refused'}"])
    except Exception as e:  # noqa: BLE001 - any refusal of the config code is the answer
        return answer([f"torchtitan 0.3 ConfigManager: {type(e).__name__}: {e}"])
    flat = flatten(cfg) if config else None
    if world:
        from torchtitan.distributed.parallel_dims import ParallelDims

        try:
            dims = ParallelDims.from_config(cfg.parallelism, world)
        except (AssertionError, ValueError) as e:
            return answer([f"torchtitan 0.3 ParallelDims: {e}"], flat)
        if flat is not None:
            flat["derived.dp_shard"] = dims.dp_shard
    return answer([], flat)


def main() -> int:
    logging.disable(logging.WARNING)  # "HF assets path ... does not exist!" is not the check's business
    import torchtitan  # noqa: F401

    config = "--config" in sys.argv[1:]
    jobs = json.load(sys.stdin)
    json.dump([_one(a, w, config=config) for a, w in jobs], sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
