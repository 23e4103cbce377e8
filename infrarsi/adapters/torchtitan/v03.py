"""torchtitan 0.3's own config check, run in a process of its own.

torchtitan 0.2 and 0.3 share one package name, so 0.3 lives in a target directory of its own (see
:data:`infrarsi.adapters.torchtitan.check.TORCHTITAN03_ENV`) and is imported here, never beside 0.2. Reads
one JSON list of jobs ``[[args, world_size], ...]`` on stdin and writes one JSON list of results, each the
list of torchtitan's refusals ([] = accepted): ``ConfigManager().parse_args(args)`` (tyro, the config
function, every config class's ``__post_init__``) and then ``ParallelDims.from_config``.

    PYTHONPATH=<target> python -m infrarsi.adapters.torchtitan.v03 < jobs.json
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


def _one(args: list[str], world: int | None) -> list[str]:
    from torchtitan.config import ConfigManager

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = ConfigManager().parse_args(list(args))
    except SystemExit:
        text = " ".join(ln for ln in (_BOX.sub("", x).strip() for x in (err.getvalue() + out.getvalue()).splitlines())
                        if ln and not ln.startswith("For full helptext"))
        return [f"torchtitan 0.3 ConfigManager: {text or 'the command line was refused'}"]
    except Exception as e:  # noqa: BLE001 - any refusal of the config code is the answer
        return [f"torchtitan 0.3 ConfigManager: {type(e).__name__}: {e}"]
    if world:
        from torchtitan.distributed.parallel_dims import ParallelDims

        try:
            ParallelDims.from_config(cfg.parallelism, world)
        except (AssertionError, ValueError) as e:
            return [f"torchtitan 0.3 ParallelDims: {e}"]
    return []


def main() -> int:
    logging.disable(logging.WARNING)  # "HF assets path ... does not exist!" is not the check's business
    import torchtitan  # noqa: F401

    jobs = json.load(sys.stdin)
    json.dump([_one(a, w) for a, w in jobs], sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
