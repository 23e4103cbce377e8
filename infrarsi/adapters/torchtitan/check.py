"""torchtitan's own word on a setting, before anything is launched.

A setting the knob space calls valid can still be one the framework refuses; a refusal on the cluster
costs an allocation. So every trial's launch is first put to the framework's own config code, where it
is installed, and a refused setting becomes an ``invalid`` trial carrying the framework's message, with
no launch (the runner records a ``ValueError`` from ``Adapter.launch`` that way; the tuner is told like
any other failed trial).

- torchtitan 0.2.x: ``ConfigManager.parse_args`` on the emitted command line (the real parser: job
  file, field names, value types), then ``ParallelDims`` (its degree checks) and the model-converter
  registry. Checks torchtitan makes only on a GPU node (float8 recipe with the fp8 all-gather, async TP
  without a compiled model) are stated here in torchtitan's words.
- torchtitan 0.3.x: the same package name as 0.2.x, so 0.3 sits in a target directory of its own
  (``$INFRARSI_TORCHTITAN03``, default ``<venv>/torchtitan-0.3``) and its ``ConfigManager`` and
  ``ParallelDims`` run in a subprocess (:mod:`.v03`), a batch of command lines at a time.

A framework that is not installed checks nothing (``available`` says whether 0.2.x is).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

from ..base import FrameworkRejected


def available() -> bool:
    """Whether torchtitan 0.2.x's config code is importable here."""
    try:
        from torchtitan.config import ConfigManager  # noqa: F401
    except ImportError:
        return False
    return True


_BOX = re.compile(r"[\u2500-\u257f]+|-{3,}")


def _tyro_message(text: str) -> str:
    """tyro's boxed error as one line (the box drawing and the help hint dropped)."""
    lines = [_BOX.sub("", ln).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("For full helptext")]
    return " ".join(lines) or "the command line was refused"


def torchtitan_config(args: list[str]):
    """torchtitan's ``ConfigManager().parse_args(args)`` (the JobConfig), or FrameworkRejected with its message."""
    from torchtitan.config import ConfigManager

    out, err = io.StringIO(), io.StringIO()
    log = logging.getLogger("torchtitan")  # it warns about missing HF assets: not the check's business
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ConfigManager().parse_args(list(args))
    except SystemExit:
        raise FrameworkRejected(f"torchtitan ConfigManager: {_tyro_message(err.getvalue() + out.getvalue())}") from None
    except (AssertionError, ValueError, TypeError, KeyError, FileNotFoundError) as e:
        raise FrameworkRejected(f"torchtitan ConfigManager: {type(e).__name__}: {e}") from None
    finally:
        log.setLevel(level)


def torchtitan_job_checks(cfg, *, world_size: int | None) -> list[str]:
    """torchtitan's checks of a parsed JobConfig that do not need a GPU to state: ParallelDims (its own
    code), the converter registry, and two checks it makes while building the model on the GPU node."""
    out: list[str] = []
    p = cfg.parallelism
    if world_size:
        from torchtitan.distributed import ParallelDims

        try:
            ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                         cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                         ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=world_size)
        except (AssertionError, ValueError) as e:
            out.append(f"torchtitan ParallelDims: {e}")
    import torchtitan.components.quantization  # noqa: F401  (registers the float8 and mx converters)
    from torchtitan.protocols import model_converter

    known = getattr(model_converter, "_registry_model_converter_cls", None)
    for name in cfg.model.converters:
        if known is not None and name not in known:  # build_model_converters looks each name up
            out.append(f"torchtitan model converters: KeyError: {name!r} (model.converters = {cfg.model.converters})")
    f8 = cfg.quantize.linear.float8
    if any("float8" in c for c in cfg.model.converters if "grouped_mm" not in c) and f8.recipe_name is not None \
            and f8.enable_fsdp_float8_all_gather:
        out.append("torchtitan Float8LinearConverter: using `float8_config.enable_fsdp_float8_all_gather` together "
                   "with `float8_config.recipe_name` is not supported")
    if p.enable_async_tensor_parallel and p.tensor_parallel_degree > 1 and not (
            cfg.compile.enable and "model" in cfg.compile.components):
        out.append("torchtitan: Async TP requires 'model' in --compile.components and --compile.enable")
    return out


def torchtitan_args(parsed, argv: list[str], env: Mapping[str, str] | None = None) -> list[str] | None:
    """The arguments torchtitan's train.py would get from this emitted launch (the job file first, its path
    made absolute), or None when the launch is a 0.3 command line (another parser) or names no job file."""
    if parsed.style != "toml":
        return None
    args = list(argv)
    if "torchtitan.train" in args:
        args = args[args.index("torchtitan.train") + 1:]
    elif parsed.launch is not None and parsed.launch.program:
        args = args[len(parsed.launch.launcher) + len(parsed.launch.program):]
    job: str | None = None
    keep: list[str] = []
    k = 0
    while k < len(args):  # the job file once, absolute, first (ConfigManager reads the first one)
        a = args[k]
        if a in ("--job.config_file", "--job.config-file"):
            job = job or (args[k + 1] if k + 1 < len(args) else None)
            k += 2
            continue
        if a.startswith(("--job.config_file=", "--job.config-file=")):
            job = job or a.split("=", 1)[1]
            k += 1
            continue
        keep.append(a)
        k += 1
    job = job or (env or {}).get("CONFIG_FILE") or parsed.toml_path
    if not job:
        return None
    p = Path(job)
    if not p.is_absolute() and parsed.base_dir and (Path(parsed.base_dir) / p).is_file():
        p = Path(parsed.base_dir) / p  # a script's relative path: from the folder it is read in
    return ["--job.config_file", str(p.resolve()), *keep]


TORCHTITAN03_ENV = "INFRARSI_TORCHTITAN03"


def torchtitan03_dir() -> Path | None:
    """The target directory that holds torchtitan 0.3 (``pip install --target DIR torchtitan==0.3.0 ...``), if any."""
    d = Path(os.environ.get(TORCHTITAN03_ENV) or Path(sys.prefix) / "torchtitan-0.3")
    return d if (d / "torchtitan" / "config" / "manager.py").is_file() else None


def torchtitan03_args(parsed, argv: list[str], env: Mapping[str, str] | None = None) -> list[str] | None:
    """What 0.3's train.py would get from this emitted launch (run_train.sh's MODULE/CONFIG made flags)."""
    if parsed.style != "cli":
        return None
    args = list(argv)
    if "torchtitan.train" in args:
        return args[args.index("torchtitan.train") + 1:]
    if parsed.launch is not None and parsed.launch.program:
        args = args[len(parsed.launch.launcher) + len(parsed.launch.program):]
        e = dict(env or {})
        if "--module" not in args and (e.get("MODULE") or e.get("CONFIG")):
            args = ["--module", e.get("MODULE", "llama3"), "--config", e.get("CONFIG", "llama3_debugmodel"), *args]
        return args
    return None


def _run03(jobs: list[tuple[list[str], int | None]], flags: list[str], timeout_s: float) -> list | None:
    target = torchtitan03_dir()
    if target is None:
        return None
    here = str(Path(__file__).resolve().parents[3])  # this checkout's infrarsi, beside 0.3's torchtitan
    path = [str(target), here, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run([sys.executable, "-m", "infrarsi.adapters.torchtitan.v03", *flags], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env, timeout=timeout_s, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the torchtitan 0.3 check did not run ({tail}); reinstall it into {target}")
    return json.loads(proc.stdout)


def check_torchtitan03_many(jobs: list[tuple[list[str], int | None]], *, timeout_s: float = 600) -> list[list[str]] | None:
    """torchtitan 0.3's refusals for each (args, world size), in one subprocess; None when 0.3 is not installed."""
    return _run03(jobs, [], timeout_s)


def torchtitan03_configs(jobs: list[tuple[list[str], int | None]], *, timeout_s: float = 600) -> list[dict] | None:
    """torchtitan 0.3's reading of each (args, world size), in one subprocess: ``{"refused": [...], "config":
    {flattened config}}``; None when 0.3 is not installed."""
    return _run03(jobs, ["--config"], timeout_s)


def check_torchtitan(parsed, argv: list[str], *, env: Mapping[str, str] | None = None,
                     world_size: int | None) -> list[str]:
    """torchtitan's refusals of this emitted launch ([] when it accepts, is not installed, or is a 0.3 launch)."""
    if parsed.style == "cli":
        args03 = torchtitan03_args(parsed, argv, env)
        got = check_torchtitan03_many([(args03, world_size)]) if args03 is not None else None
        return got[0] if got else []
    if not available():
        return []
    args = torchtitan_args(parsed, argv, env)
    if args is None:
        return []
    try:  # settings that differ only in the environment (NCCL knobs) give the same command: parsed once
        key = (tuple(args), world_size, Path(args[1]).read_bytes())
    except OSError:
        key = None
    if key is not None and key in _TT_CACHE:
        return list(_TT_CACHE[key])
    try:
        cfg = torchtitan_config(args)
        out = torchtitan_job_checks(cfg, world_size=world_size)
    except FrameworkRejected as e:
        out = [str(e)]
    if key is not None:
        if len(_TT_CACHE) > 4096:
            _TT_CACHE.clear()
        _TT_CACHE[key] = tuple(out)
    return out


_TT_CACHE: dict[tuple, tuple[str, ...]] = {}
