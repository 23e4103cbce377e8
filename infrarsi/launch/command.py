"""Reading launcher command lines (torchrun, srun, python) and ``#SBATCH`` directives.

:func:`split_launcher` splits one expanded command (see :mod:`.bash` for reading whole scripts) into
launcher (torchrun/srun/python), the program (a script or ``-m module``) and the program's arguments,
and reads the world size the launcher and the batch directives state.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass, field

# Environment names that say they hold a secret (HF_TOKEN, SLURM_JWT, ...): never recorded in a command line nor
# passed to a trial (execute/isolation.py).
SECRET_NAME = re.compile(r"(^|_)(API_?KEY|SECRET|SECRET_ACCESS_KEY|PASSWORD|PASSWD|TOKEN|CREDENTIALS?|JWT|KEY)$", re.I)


# --------------------------------------------------------------------------- launchers
# torchrun options that take no value; every other option takes one.
_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module"}
# srun options that take no value (long options take theirs with = or as the next word).
_SRUN_FLAGS = {"-l", "--label", "-u", "--unbuffered", "--exclusive", "--overlap", "-v", "--verbose", "-Q", "--quiet",
               "-K", "--kill-on-bad-exit", "-X", "--disable-status", "-Z", "--no-allocate", "--pty", "--export-file",
               "--mpi-prefix", "--overcommit", "-O", "--whole", "--exact"}
# sbatch options that take no value (``--exclusive=user`` still reads its value through the = form).
_SBATCH_FLAGS = {"--exclusive", "--overcommit", "-O", "--requeue", "--no-requeue", "--contiguous", "-H", "--hold",
                 "--parsable", "-W", "--wait", "--test-only", "--use-min-nodes", "--spread-job", "--ignore-pbs",
                 "-k", "--no-kill", "-Q", "--quiet", "-v", "--verbose", "--reboot", "--get-user-env"}
_LAUNCHERS = {"torchrun", "srun"}
# Container runners, as (command, subcommand): the image (or enroot's container name) follows their options, then the
# command run inside. Per runner family, the options that take no value (every other option takes one).
RUNNERS = {("apptainer", "exec"): "apptainer", ("apptainer", "run"): "apptainer", ("singularity", "exec"): "apptainer",
           ("singularity", "run"): "apptainer", ("docker", "run"): "docker", ("podman", "run"): "docker",
           ("enroot", "start"): "enroot"}
_RUNNER_FLAGS = {
    "apptainer": {"--nv", "--nvccli", "--rocm", "-e", "--cleanenv", "-c", "--contain", "-C", "--containall", "-w",
                  "--writable", "--writable-tmpfs", "--no-home", "-f", "--fakeroot", "-u", "--userns", "-p", "--pid",
                  "-i", "--ipc", "-n", "--net", "--compat", "--no-init", "--no-privs", "--keep-privs",
                  "--allow-setuid", "--boot", "--no-htty", "--no-umask", "--no-eval", "--unsquash", "--disable-cache",
                  "-q", "--quiet", "-s", "--silent", "-d", "--debug", "-v", "--verbose"},
    "docker": {"--rm", "-i", "-t", "-it", "-ti", "-d", "--detach", "--init", "--privileged", "--interactive", "--tty",
               "--read-only", "--no-healthcheck", "--oom-kill-disable", "-P", "--publish-all"},
    "enroot": {"-r", "--root", "-w", "--rw"},
}


def runner_prefix(argv: list[str], k: int) -> int | None:
    """The index after a container runner's command, options and image at ``argv[k]`` (``apptainer exec --nv
    img.sif``, ``docker run --rm -v a:b IMAGE``, ``enroot start --mount a:b NAME``); None when ``argv[k]`` starts
    no runner."""
    family = RUNNERS.get((os.path.basename(argv[k]), argv[k + 1] if k + 1 < len(argv) else ""))
    if family is None:
        return None
    _, j = _launcher_options(argv, k + 2, [], _RUNNER_FLAGS[family])
    return j + 1 if j < len(argv) else None


@dataclass
class Launch:
    """One launcher command split into its parts. ``launcher`` is the prefix kept verbatim
    (``["torchrun", "--nproc_per_node", "8", ...]``, possibly srun then torchrun); ``program`` is the
    script or ``["-m", "module"]``; ``args`` are the program's arguments."""

    launcher: list[str]
    program: list[str]
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    nproc_per_node: int | None = None
    nnodes: int | None = None
    ntasks: int | None = None  # srun total tasks when srun starts the program itself
    kinds: list[str] = field(default_factory=list)  # launchers in order, e.g. ["srun", "torchrun"]
    line: int | None = None

    @property
    def world_size(self) -> int | None:
        if "torchrun" in self.kinds:
            if self.nproc_per_node:
                return self.nproc_per_node * (self.nnodes or 1)
            return None
        if "srun" in self.kinds:
            if self.ntasks:
                return self.ntasks
            if self.nproc_per_node:
                return self.nproc_per_node * (self.nnodes or 1)
            return None
        return None

    def argv(self, args: list[str] | None = None) -> list[str]:
        return [*self.launcher, *self.program, *(self.args if args is None else args)]


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)(?::(\d+))?\s*", text)
    if not m:
        return None
    return int(m.group(2) or m.group(1))


def _opt(argv: list[str], k: int) -> tuple[str, str | None, int]:
    """(name, value or None, next index) for an option at argv[k] that takes a value."""
    a = argv[k]
    if a.startswith("--") and "=" in a:
        n, v = a.split("=", 1)
        return n, v, k + 1
    if len(a) > 2 and a[0] == "-" and a[1] != "-":  # -N2
        return a[:2], a[2:], k + 1
    return a, (argv[k + 1] if k + 1 < len(argv) else None), k + 2


def _launcher_options(argv: list[str], k: int, launcher: list[str], bare: Collection[str],
                      stop: Collection[str] = ()) -> tuple[list[tuple[str, str | None]], int]:
    """Consume a launcher's options from argv[k] (up to its first non-option word, or a word in ``stop``),
    copying them into ``launcher``: flags in ``bare`` take no value. Returns the valued options as
    (name, value) pairs and the index after the last option."""
    opts = []
    while k < len(argv) and argv[k].startswith("-") and argv[k] not in stop:
        if argv[k] in bare:
            launcher.append(argv[k])
            k += 1
            continue
        name, val, k2 = _opt(argv, k)
        launcher.extend(argv[k:k2])
        opts.append((name, val))
        k = k2
    return opts, k


KEPT = "${PWD}"
"""How a launch script's ``$PWD`` reads when it is kept as the user wrote it (:func:`expand_kept` resolves it
where the launch starts): the directory a script runs from is the launch's, not the reading machine's."""


def user_environment() -> dict[str, str]:
    """The environment infrarsi runs in, as a launch script reads it (``$HOME/data``, a ``$DATA_DIR`` the user
    exported): without PWD and OLDPWD (the script's folder is the contract's, see KEPT) and without the names that
    hold secrets (their values would land in the recorded command line). Only what the script exports reaches a
    trial."""
    return {k: v for k, v in os.environ.items() if k not in ("PWD", "OLDPWD") and not SECRET_NAME.search(k)}


def expand_kept(argv: list[str], cwd: str | None = None) -> list[str]:
    """``argv`` with each kept ``${PWD}`` made the directory the command starts in (``cwd``, default this
    process's working directory), as the shell that runs the user's script would make it."""
    if not any(KEPT in a for a in argv):
        return list(argv)
    here = str(cwd) if cwd is not None else os.getcwd()
    return [a.replace(KEPT, here) for a in argv]


def is_python(word: str) -> bool:
    return re.fullmatch(r"python(\d(\.\d+)?)?", os.path.basename(word)) is not None


def split_launcher(argv: list[str], *, env: dict[str, str] | None = None, sbatch: list[str] | None = None,
                   line: int | None = None) -> Launch:
    """Split an expanded command into launcher prefix, program and program arguments.

    Understands ``torchrun``, ``python -m torch.distributed.run``/``launch``, ``srun`` (also around
    torchrun or python), and a bare ``python script.py`` / ``python -m module``. ``sbatch`` directive
    arguments supply srun's node/task counts when srun does not state them."""
    out = Launch(launcher=[], program=[], args=[], env=dict(env or {}), line=line)
    k = 0
    n = len(argv)
    srun_nodes = srun_tpn = None
    # #SBATCH defaults
    if sbatch:
        j = 0
        while j < len(sbatch):
            if sbatch[j] in _SBATCH_FLAGS:  # --exclusive, --overcommit: no value, the next word is an option
                j += 1
            elif sbatch[j].startswith("-"):
                name, val, j2 = _opt(sbatch, j)
                if name in ("-N", "--nodes"):
                    srun_nodes = _int(val)
                elif name == "--ntasks-per-node":
                    srun_tpn = _int(val)
                j = j2
            else:
                j += 1
    while k < n:
        w = argv[k]
        base = os.path.basename(w)
        if base == "env" and not out.kinds:
            out.launcher.append(w)
            k += 1
            while k < n and re.match(r"[A-Za-z_]\w*=", argv[k]):
                name, val = argv[k].split("=", 1)
                out.env[name] = val
                out.launcher.append(argv[k])
                k += 1
            continue
        if base == "srun":
            out.kinds.append("srun")
            out.launcher.append(w)
            k += 1
            ntasks = None
            opts, k = _launcher_options(argv, k, out.launcher, _SRUN_FLAGS)
            for name, val in opts:
                if name in ("-N", "--nodes"):
                    srun_nodes = _int(val)
                elif name == "--ntasks-per-node":
                    srun_tpn = _int(val)
                elif name in ("-n", "--ntasks"):
                    ntasks = _int(val)
            out.nnodes = srun_nodes
            out.nproc_per_node = srun_tpn
            out.ntasks = ntasks if ntasks else ((srun_tpn or 0) * (srun_nodes or 1) or None)
            continue
        if (end := runner_prefix(argv, k)) is not None:  # srun [opts] apptainer exec [opts] IMAGE torchrun ...
            out.kinds.append("container")
            out.launcher.extend(argv[k:end])
            k = end
            continue
        if base == "torchrun" or (is_python(w) and argv[k + 1:k + 3] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"])):
            out.kinds.append("torchrun")
            if base == "torchrun":
                out.launcher.append(w)
                k += 1
            else:
                out.launcher.extend(argv[k:k + 3])
                k += 3
            nnodes_from_srun = out.nnodes
            opts, k = _launcher_options(argv, k, out.launcher, _TORCHRUN_FLAGS, stop=("-m", "--module"))
            for name, val in opts:
                if name in ("--nproc_per_node", "--nproc-per-node"):
                    out.nproc_per_node = _int(val)
                elif name == "--nnodes":
                    out.nnodes = _int(val)
            if out.nnodes is None:
                out.nnodes = nnodes_from_srun
            out.ntasks = None
            if k < n and argv[k] in ("-m", "--module"):
                out.program = argv[k:k + 2]
                out.args = argv[k + 2:]
            else:
                out.program = argv[k:k + 1]
                out.args = argv[k + 1:]
            return out
        if is_python(w):
            out.kinds.append("python")
            out.launcher.append(w)
            k += 1
            while k < n and argv[k].startswith("-") and argv[k] not in ("-m",):
                out.launcher.append(argv[k])
                k += 1
            if k < n and argv[k] == "-m":
                out.program = argv[k:k + 2]
                out.args = argv[k + 2:]
            else:
                out.program = argv[k:k + 1]
                out.args = argv[k + 1:]
            return out
        if out.kinds:  # srun then a program that is not python/torchrun
            out.program = [w]
            out.args = argv[k + 1:]
            return out
        break
    if not out.program:
        out.program = argv[k:k + 1]
        out.args = argv[k + 1:]
    return out


def world_from_variables(variables: dict[str, str | list[str]]) -> int | None:
    """World size from the variables launch scripts conventionally set (WORLD_SIZE, or
    GPUS_PER_NODE x NUM_NODES/NNODES), when they are plain numbers."""

    def num(name: str) -> int | None:
        v = variables.get(name)
        return int(v) if isinstance(v, str) and v.strip().isdigit() else None

    ws = num("WORLD_SIZE")
    if ws:
        return ws
    gpn = next((num(x) for x in ("GPUS_PER_NODE", "NPROC_PER_NODE", "NGPU", "NUM_GPUS") if num(x)), None)
    nodes = next((num(x) for x in ("NUM_NODES", "NNODES", "NODES", "N_NODES") if num(x)), None)
    if gpn:
        return gpn * (nodes or 1)
    return None


def shell_join(argv: list[str], env: dict[str, str] | None = None) -> str:
    """A command line a shell reads back as ``argv`` (with ``env`` assignments first), except that a kept
    ``${PWD}`` stays a live expansion: ``--data-cache-path ${PWD}/cache`` is written
    ``--data-cache-path "${PWD}"/cache``, every other character quoted as ``shlex.quote`` quotes it."""
    def word(w: str) -> str:
        if KEPT not in w:
            return shlex.quote(w)
        return f'"{KEPT}"'.join(shlex.quote(part) if part else "" for part in w.split(KEPT))

    pre = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return " ".join(pre + [word(a) for a in argv])


# `--flag $VAR`, `--flag "${VAR}"`, `--flag ${3}` (no default) in a script's text.
_FLAG_THEN_VAR = re.compile(r'(?<![\w-])(--[A-Za-z][\w-]*)[ \t]+(?:\\\n\s*)?"?\$(?:\{([A-Za-z_]\w*|\d+)\}|([A-Za-z_]\w*|\d))')


def unfilled_flags(text: str, argv: list[str], variables: dict[str, str | list[str]],
                   args: list[str] | None = None) -> list[str]:
    """One message per flag of the launch command ``argv`` that is left without a value because the
    variable written after it in the script (``--data-path $DATA_PATH``, ``--vocab-file $3``) is empty:
    bash drops the word and the flag takes the next flag as its value, or none. The message names the
    flag and the contract field that fills it."""
    args = list(args or [])
    out: list[str] = []
    for ln in text.splitlines():
        code = ln.split(" #")[0] if not ln.lstrip().startswith("#") else ""
        for m in _FLAG_THEN_VAR.finditer(code):
            flag, var = m.group(1), m.group(2) or m.group(3)
            if flag not in argv:
                continue
            k = argv.index(flag)
            if k + 1 < len(argv) and not (argv[k + 1].startswith("--") or argv[k + 1] == ""):
                continue  # it has a value
            if var.isdigit():
                if int(var) <= len(args):
                    continue
                msg = (f"{flag} has no value: ${var} (the script's positional argument {var}) is not given; "
                       f"list the script's arguments in the contract's workload.script_args")
            else:
                val = variables.get(var)
                if val not in (None, "", []):
                    continue
                src = re.search(rf"(?m)^\s*(?:export\s+)?{var}=\"?\$\{{?(\d+)\}}?", text)
                if src and int(src.group(1)) > len(args):
                    msg = (f"{flag} has no value: ${var} is the script's positional argument {src.group(1)}, which is "
                           f"not given; list the script's arguments in the contract's workload.script_args")
                else:
                    msg = (f"{flag} has no value: ${var} is not set; set it in the contract's workload.script_env "
                           f"(or workload.env when trials need it too)")
            if msg not in out:
                out.append(msg)
    return out
