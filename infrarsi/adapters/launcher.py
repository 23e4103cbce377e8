"""``infrarsi-launch``: apply a promoted profile to a torchrun/srun command, then run or print it.

    infrarsi-launch [--profile FILE] [--dry-run] -- torchrun --nproc-per-node 8 pretrain_gpt.py ...

The profile is a JSON file ``{"framework": "megatron" | "torchtitan", "setting": {knob: value}}``
(catalog knob names; knobs it omits keep the command's values; a knob torchtitan takes from the environment,
``intra_op_threads``, is set as ``OMP_NUM_THREADS``). The command is read by the
framework's adapter, its knob flags and environment are rewritten, every other argument is kept as
written, and the result is exec'd (``--dry-run``: printed as one shell line, not run). A setting that
breaks a rule of the knob space is refused with the rule's message (exit 2). Without ``--profile``
the command runs unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..trial import LaunchSpec
from ..launch.command import shell_join
from .registry import framework_of, profile_frameworks, spec



class ProfileError(ValueError):
    pass


def load_profile(path: str | Path) -> tuple[str | None, dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise ProfileError(f"profile {p} does not exist; pass the promoted profile JSON written by `infrarsi apply`")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ProfileError(f"profile {p}: not valid JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("setting"), dict):
        raise ProfileError(f"profile {p}: expected {{\"framework\": ..., \"setting\": {{knob: value}}}}")
    fw = data.get("framework")
    if fw is not None and fw not in profile_frameworks():
        raise ProfileError(f"profile {p}: framework {fw!r} is not one of {', '.join(profile_frameworks())}")
    unknown = set(data) - {"framework", "setting", "name", "speedup", "trial", "run", "notes"}
    if unknown:
        raise ProfileError(f"profile {p}: unknown key(s) {sorted(unknown)}; keep framework and setting")
    return fw, dict(data["setting"])


def detect(argv: list[str]) -> str:
    fw = framework_of(argv)
    if fw is None or fw not in profile_frameworks():
        raise ProfileError(f"cannot tell the framework of `{' '.join(argv[:6])} ...`; set \"framework\" in the profile")
    return fw


def apply_profile(argv: list[str], framework: str | None, setting: Mapping[str, Any], *,
                  env: Mapping[str, str] | None = None, cwd: str | Path = ".") -> tuple[LaunchSpec, list[str]]:
    """The rewritten launch and the rule violations of the resulting setting (empty = fine): the framework's
    spec rewrites it (``FrameworkSpec.rewrite_profile``).

    ``env`` is the environment the command would have run with (NCCL variables are read from it)."""
    fw = framework or detect(argv)
    base_env = {k: v for k, v in (env or {}).items() if k.startswith(("NCCL_", "CUDA_DEVICE_MAX_CONNECTIONS"))}
    rewrite = spec(fw).rewrite_profile
    if rewrite is None:
        raise ProfileError(f"framework {fw!r}: infrarsi-launch rewrites {', '.join(profile_frameworks())} commands only")
    return rewrite(argv, setting, base_env, cwd)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: infrarsi-launch [--profile FILE] [--dry-run] -- <torchrun/srun command>", file=sys.stderr)
        return 2
    cut = args.index("--")
    ap = argparse.ArgumentParser(prog="infrarsi-launch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", help="promoted profile JSON: {\"framework\": ..., \"setting\": {...}}")
    ap.add_argument("--dry-run", action="store_true", help="print the command; do not run it")
    opts = ap.parse_args(args[:cut])
    command = args[cut + 1:]
    if not command:
        print("infrarsi-launch: nothing after --; give the torchrun/srun command", file=sys.stderr)
        return 2
    env_add: dict[str, str] = {}
    if opts.profile:
        try:
            fw, setting = load_profile(opts.profile)
            spec, problems = apply_profile(command, fw, setting, env=os.environ, cwd=os.getcwd())
        except ValueError as e:
            print(f"infrarsi-launch: {e}", file=sys.stderr)
            return 2
        if problems:
            print("infrarsi-launch: the profile's setting breaks these rules, so it is not launched:", file=sys.stderr)
            for p in problems:
                print(f"  - {p}", file=sys.stderr)
            return 2
        command = spec.argv
        env_add = {k: v for k, v in spec.env.items() if os.environ.get(k) != v}
        removed = [k for k in os.environ if k.startswith("NCCL_") and k not in spec.env]
    else:
        removed = []
    if opts.dry_run:
        print(shell_join(command, env_add))
        return 0
    env = {k: v for k, v in os.environ.items() if k not in removed}
    env.update(env_add)
    sys.stdout.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        print(f"infrarsi-launch: cannot run {command[0]!r}: {e}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
