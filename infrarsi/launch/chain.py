"""A launch read through its layers: an sbatch script whose ``srun`` runs ``bash train.sh``, which runs torchrun.

Teams rarely launch training with one command. The usual shape is a chain of scripts::

    sbatch_gpt.sh   #SBATCH -N 2 ...; export TP=4; srun --container-image=img.sqsh bash scripts/train_gpt.sh 8
    train_gpt.sh    GPUS=$1; torchrun --nproc_per_node $GPUS pretrain_gpt.py --tensor-model-parallel-size $TP ...

:func:`follow` reads each script with the project's bash-subset reader (:mod:`.bash`) the way bash runs the chain:
a child script (``bash|sh FILE ARGS``, ``./FILE ARGS``, ``bash -c "..."``) starts with the environment its parent
exports and its own positional arguments; a sourced file (``source``/``.``) runs inside its parent. The wrappers in
front of a child script are kept as the launch's prefix, in order: ``srun`` with every option it was given,
``env VAR=...`` (whose variables join the environment), and the container runners (pyxis's ``--container-*``
options of srun, ``apptainer|singularity exec|run [opts] IMAGE``, ``docker|podman run [opts] IMAGE``, ``enroot start
[opts] NAME``). The launch is the last command, in any file of the chain, that ``claims`` accepts; its argv is the
prefixes followed by the command as the innermost script runs it (``srun --container-image=img.sqsh torchrun
--nproc_per_node 8 pretrain_gpt.py ...``), and each file read is returned with its text; every word of the launch is
placed where it was read (:mod:`.placed`: a ``$1`` or ``"$@"`` word in the file of the command that passes it, an
exported variable where it is assigned), so that an edit is made at that place (:mod:`infrarsi.apply.launch_edit`).

A batch script (one with ``#SBATCH`` lines) is read with the job's Slurm variables its directives state
(``SLURM_NNODES``, ``SLURM_NTASKS_PER_NODE``, ``SLURM_GPUS_PER_NODE``) and ``SLURM_SUBMIT_DIR`` as its working folder;
the per-task ones (``SLURM_PROCID``, ``SLURM_NODEID``) stay unset, as the launch is read for every task at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .bash import Command, ScriptError, ScriptResult, interpret_script, sbatch_directives
from .command import _RUNNER_FLAGS, _SRUN_FLAGS, KEPT, RUNNERS, _launcher_options, _opt, runner_prefix
from .placed import Placed, assigned, part_of

__all__ = ["Followed", "Hop", "follow"]

MAX_DEPTH = 8  # scripts deep: a chain that calls itself is refused past it
_SHELLS = ("bash", "sh")
# bash/sh options that take no value (``bash -x train.sh``, ``sh -e``, ``bash --login``)
_SHELL_FLAGS = re.compile(r"-[xeuvlia]+|\+[xeuv]+|--login|--norc|--noprofile|-o|pipefail|errexit|nounset")


@dataclass(frozen=True)
class Hop:
    """One step of the chain: the command at ``path:line`` that runs the next script, and how (``via``: the words
    in front of the script, e.g. ``srun --nodes=2 bash``)."""

    path: str
    line: int
    via: str


@dataclass
class Followed:
    """What :func:`follow` found: the launch ``command`` (its argv with the chain's prefixes; its ``path`` and
    ``line`` where it is written), the innermost script's reading, the chain's hops, the environment the launch is
    given (``env``: what the chain exports), the batch directives, and every file read (path -> text, outermost
    first)."""

    command: Command | None
    result: ScriptResult  # the reading of the script the launch is in
    text: str  # that script's text
    path: str
    args: list[str]  # that script's positional arguments
    env: dict[str, str]
    sbatch: list[str]
    hops: list[Hop] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    top: ScriptResult | None = None  # the outermost script's reading (where it exits, when the launch is not found)
    missed: list[str] = field(default_factory=list)  # scripts the chain runs that could not be read, and why

    def trail(self, program: str) -> str:
        """``a.sh:12 (srun bash) -> b.sh:30 -> program``: the chain as ``infrarsi knobs`` prints it."""
        steps = [f"{_shown(h.path)}:{h.line} ({h.via})" for h in self.hops]
        if self.command is not None:
            steps.append(f"{_shown(self.command.path or self.path)}:{self.command.line}")
        return " -> ".join([*steps, program])


def _shown(path: str) -> str:
    """``path`` relative to the working folder when it is inside it (as the user typed the first script)."""
    if not os.path.isabs(path):
        return path
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _slurm_env(sbatch: list[str], submit_dir: str) -> dict[str, str]:
    """The job-wide Slurm variables an sbatch script sees, as far as its directives state them."""
    out = {"SLURM_SUBMIT_DIR": submit_dir}
    j = 0
    while j < len(sbatch):
        if not sbatch[j].startswith("-") or "=" not in sbatch[j] and j + 1 >= len(sbatch):
            j += 1
            continue
        name, val, j2 = _opt(sbatch, j)
        if val is not None and val.startswith("-"):  # a switch (--exclusive): no value
            j += 1
            continue
        if name in ("-N", "--nodes") and val and val.isdigit():
            out["SLURM_NNODES"] = out["SLURM_JOB_NUM_NODES"] = val
        elif name == "--ntasks-per-node" and val and val.isdigit():
            out["SLURM_NTASKS_PER_NODE"] = val
        elif name in ("-n", "--ntasks") and val and val.isdigit():
            out["SLURM_NTASKS"] = val
        elif name == "--gpus-per-node" and val:
            out["SLURM_GPUS_PER_NODE"] = val.split(":")[-1]
        elif name in ("-J", "--job-name") and val:
            out["SLURM_JOB_NAME"] = val
        j = j2
    if "SLURM_NTASKS" not in out and "SLURM_NTASKS_PER_NODE" in out:
        out["SLURM_NTASKS"] = str(int(out["SLURM_NTASKS_PER_NODE"]) * int(out.get("SLURM_NNODES", "1")))
    return out


def _runner_env(argv: list[str], k: int, end: int) -> tuple[bool, dict[str, str], list[str]]:
    """For the container runner at ``argv[k:end]``: (whether it starts the command with a clean environment, the
    variables it sets, the names it passes through from the host). Apptainer/Singularity pass the host's environment
    unless ``--cleanenv``/``--containall``; docker and podman pass only ``-e``/``--env``; enroot passes it."""
    family = RUNNERS[(os.path.basename(argv[k]), argv[k + 1])]
    clean = family == "docker"
    env: dict[str, str] = {}
    passed: list[str] = []
    j = k + 2
    while j < end - 1:
        a = argv[j]
        if a in ("--cleanenv", "-e", "--containall", "-C") and family == "apptainer":
            clean = True
        if a in _RUNNER_FLAGS[family]:
            j += 1
            continue
        name, val, j = _opt(argv, j)
        if name in ("--env", "-e") and val is not None:
            for item in _commas(val) if family == "apptainer" and all("=" in x for x in val.split(",")) else [val]:
                if "=" in item:
                    n = item.split("=", 1)[0]
                    env[n] = assigned(part_of(item, len(n) + 1, len(item) - len(n) - 1), n)
                else:
                    passed.append(item)
    return clean, env, passed


def _commas(val: str) -> list[str]:
    """``val.split(",")``, each item placed where it was read."""
    out, at = [], 0
    for item in val.split(","):
        out.append(part_of(val, at, len(item)))
        at += len(item) + 1
    return out


def _wrappers(argv: list[str]) -> tuple[list[str], dict[str, str], int, tuple[bool, list[str]]]:
    """(prefix kept, variables set by ``env`` and the container runners, index of what they run, (whether a runner
    starts it with a clean environment, the names it still passes)) for the wrappers at the front of ``argv``."""
    prefix: list[str] = []
    env: dict[str, str] = {}
    clean, passed = False, []
    k = 0
    while k < len(argv):
        base = os.path.basename(argv[k])
        if base == "srun":
            words = [argv[k]]
            _, k = _launcher_options(argv, k + 1, words, _SRUN_FLAGS)
            prefix += words
        elif base == "env":
            k += 1
            while k < len(argv) and (argv[k] in ("-i", "-", "--ignore-environment") or
                                     re.match(r"[A-Za-z_]\w*=", argv[k])):
                if "=" in argv[k]:
                    name = argv[k].split("=", 1)[0]
                    env[name] = assigned(part_of(argv[k], len(name) + 1, len(argv[k]) - len(name) - 1), name)
                else:
                    clean, passed, env = True, [], {}
                k += 1
        elif (end := runner_prefix(argv, k)) is not None:
            is_clean, set_env, through = _runner_env(argv, k, end)
            if is_clean:
                clean, passed, env = True, through, {}
            env.update(set_env)
            prefix += argv[k:end]
            k = end
        else:
            break
    return prefix, env, k, (clean, passed)


def _names(prefix: list[str]) -> list[str]:
    """The wrappers of a prefix, shortly: ``srun``, ``srun --container-image=IMG``, ``apptainer exec IMG``."""
    out: list[str] = []
    k = 0
    while k < len(prefix):
        if (end := runner_prefix(prefix, k)) is not None:
            out += [*prefix[k:k + 2], prefix[end - 1]]
            k = end
            continue
        if os.path.basename(prefix[k]) == "srun":
            out.append("srun")
            opts, k = _launcher_options(prefix, k + 1, [], _SRUN_FLAGS)
            out += [f"{n}={v}" for n, v in opts if n == "--container-image"]
            continue
        k += 1
    return out


class _Reader:
    """Reads the files of one chain: the texts given (an edit being checked) before the disk."""

    def __init__(self, files: Mapping[str, str] | None, cwd: str) -> None:
        self.given = dict(files or {})
        self.read: dict[str, str] = {}
        self.missed: list[str] = []  # scripts the chain runs that could not be read, one line each
        self.cwd = cwd

    def text(self, path: str) -> str:
        if path not in self.read:
            self.read[path] = self.given[path] if path in self.given else Path(path).read_text()
        return self.read[path]

    def resolve(self, word: str, script: str, cd: str | None) -> str | None:
        """The file a command names (``scripts/train.sh``, ``$(dirname "$0")/train.sh``, ``${PWD}/train.sh``), as
        the path of a file that exists (or was given), or None. A relative name is looked for from the folder the
        script has ``cd``-ed to, the working folder, then the script's own folder and the folders above it."""
        here = os.path.dirname(os.path.abspath(script)) if script and not script.startswith("<") else self.cwd
        word = _dirname_of_script(word, here).replace(KEPT, self.cwd)
        if not word or "$(" in word or "`" in word or "\x00" in word:
            return None
        if os.path.isabs(word):
            cands = [word]
        else:
            bases = [b for b in (cd, self.cwd, here) if b]
            up = Path(here)
            for _ in range(3):
                up = up.parent
                bases.append(str(up))
            cands = [os.path.normpath(os.path.join(b, word)) for b in bases]
        for c in cands:
            if c in self.given or c in self.read or os.path.isfile(c):
                return c
        return None

    def folder(self, word: str, script: str, cd: str | None) -> str | None:
        """The folder ``cd WORD`` moves to (from the folder the script is in now), None when it cannot be told."""
        here = os.path.dirname(os.path.abspath(script)) if script and not script.startswith("<") else self.cwd
        word = _dirname_of_script(word, here).replace(KEPT, self.cwd)
        if not word or "$(" in word or "`" in word or "\x00" in word or word == "-":
            return None
        return os.path.normpath(os.path.join(cd or self.cwd, os.path.expanduser(word)))


def _dirname_of_script(word: str, here: str) -> str:
    """``word`` with a leading ``$(dirname "$0")``, ``$(dirname "${BASH_SOURCE[0]}")`` or ``$(cd "$(dirname ...)" &&
    pwd)`` (never run: kept as text by the reader) made the script's folder ``here``."""
    if not word.startswith("$("):
        return word
    depth, i = 0, 0
    while i < len(word):
        if word.startswith("$(", i):
            depth, i = depth + 1, i + 2
            continue
        if word[i] == ")":
            depth -= 1
            if depth == 0:
                break
        i += 1
    head = word[:i + 1]
    if "dirname" in head and re.search(r"\$\{?(0|BASH_SOURCE)", head):
        return here + word[i + 1:]
    return word


def follow(text: str, *, path: str, env: Mapping[str, str], args: list[str] | None, cwd: str | None,
           claims: Callable[[list[str]], bool], files: Mapping[str, str] | None = None) -> Followed:
    """The launch that ``claims`` accepts, read through the chain that starts with the script ``text`` at ``path``
    (its starting environment ``env``, arguments ``args``, working folder ``cwd``; ``files``: texts to read instead
    of the disk's, by path). :class:`ScriptError` for a script the reader cannot read, naming its file and line."""
    here = cwd if cwd is not None else os.getcwd()
    reader = _Reader(files, here)
    reader.read[path] = text
    start = dict(env)
    sbatch = sbatch_directives(text)
    if sbatch:
        for k, v in _slurm_env(sbatch, start.get("PWD", here)).items():
            start.setdefault(k, v)
    found, res = _follow(reader, text, path, start, {}, list(args or []), [], claims, depth=0)
    if found is None:
        found = Followed(command=None, result=res, text=text, path=path, args=list(args or []),
                         env=dict(res.exported), sbatch=[])
    found.sbatch = sbatch
    found.files = dict(reader.read)
    found.top = res
    found.missed = list(reader.missed)
    return found


def _includer(reader: _Reader, script: str) -> Callable[[str], tuple[str, str] | None]:
    def include(word: str) -> tuple[str, str] | None:
        p = reader.resolve(word, script, None)
        return (p, reader.text(p)) if p is not None else None
    return include


def _follow(reader: _Reader, text: str, path: str, environ: dict[str, str], exported: dict[str, str],
            args: list[str], hops: list[Hop], claims: Callable[[list[str]], bool], *,
            depth: int, base: int | None = 0) -> tuple[Followed | None, ScriptResult]:
    """The last launch ``claims`` accepts in the script ``text`` or in a script it runs; None when there is none.
    ``environ``: the script's starting environment; ``exported``: what the chain above exports (the launch's
    environment); ``hops``: the steps taken to reach this script; ``base``: where ``text`` starts in the file ``path``
    (a ``bash -c`` string's; None: not written there as it is). Also the script's own reading."""
    res = interpret_script(text, path=path, env=environ, args=args, cwd=reader.cwd,
                           include=_includer(reader, path), base=base)
    best: Followed | None = None
    cd: str | None = None
    for cmd in res.commands:
        if os.path.basename(cmd.argv[0]) == "cd" and len(cmd.argv) > 1:
            cd = reader.folder(cmd.argv[1], cmd.path or path, cd)
            continue
        if claims(cmd.argv):
            env = {**exported, **res.exported, **cmd.env}
            _, wrap_env, _, (clean, passed) = _wrappers(cmd.argv)  # `docker run -e K=V IMAGE torchrun ...`
            if clean:
                env = {n: env[n] for n in passed if n in env}
            best = Followed(command=cmd, result=res, text=text, path=path, args=args, env={**env, **wrap_env},
                            sbatch=[], hops=list(hops))
            continue
        got = _child(reader, cmd, path, cd, res, environ, exported, args, hops, claims, depth)
        if got is not None:
            best = got
    return best, res


def _child(reader: _Reader, cmd: Command, path: str, cd: str | None, res: ScriptResult, environ: dict[str, str],
           exported: dict[str, str], args: list[str], hops: list[Hop], claims, depth: int) -> Followed | None:
    """The launch in the script ``cmd`` runs (through its wrappers), or None when it runs none."""
    prefix, wrap_env, k, (clean, passed) = _wrappers(cmd.argv)
    argv = cmd.argv
    if k >= len(argv):
        return None
    inline: str | None = None
    base = os.path.basename(argv[k])
    j = k
    if base in _SHELLS:
        j += 1
        while j < len(argv) and _SHELL_FLAGS.fullmatch(argv[j]):
            j += 1
        if j < len(argv) and argv[j] == "-c":  # bash -c "cd /repo; torchrun ...": the string is the script
            if j + 1 >= len(argv):
                return None
            inline = argv[j + 1]
            child_args = argv[j + 3:]
        elif j < len(argv):
            child_args = argv[j + 1:]
        else:
            return None
    elif base.endswith(".sh") or argv[k].startswith(("./", "/")):  # ./train.sh ARGS: run by its #! shell
        child_args = argv[k + 1:]
    else:
        return None
    if inline is None:
        target = reader.resolve(argv[j], path, cd)
        if target is None:
            if base in _SHELLS:
                why = ("its name comes from a command that is not run; write the script's path"
                       if "$(" in argv[j] or "`" in argv[j] else
                       f"no such file from {cd or reader.cwd} or the script's folder; run infrarsi from the folder "
                       "the job is submitted from (workload.cwd)")
                reader.missed.append(f"{cmd.path or path}:{cmd.line}: {base} {argv[j]} is not read: {why}")
            return None
        try:
            child_text, child_path = reader.text(target), target
        except (OSError, UnicodeDecodeError):  # a program, not a script
            return None
        if j == k and not (base.endswith((".sh", ".bash")) or re.match(r"#!.*\b(ba)?sh\b", child_text)):
            return None  # ./tool run directly: a script only when it says so
    else:
        child_text, child_path = inline, cmd.path or path
    if depth + 1 > MAX_DEPTH:
        raise ScriptError(cmd.line, f"more than {MAX_DEPTH} scripts deep (does {child_path} run itself?); "
                                    "launch the training command directly", path=cmd.path or path)
    # the child's environment: what this script was started with (its changes to those names included), what it
    # exports, the command's own assignments and the `env` wrapper's
    env_out = {**res.exported, **cmd.env, **wrap_env}
    child_environ = {**environ, **res.environ, **env_out}
    if clean:  # a container started with a clean environment: only what it sets or passes reaches the child
        keep = {n: child_environ[n] for n in passed if n in child_environ}
        env_out = {**keep, **wrap_env}
        exported = {}
        child_environ = {n: v for n, v in environ.items() if n == "PWD"} | env_out
    hop = Hop(path=cmd.path or path, line=cmd.line, via=" ".join([*_names(prefix), *argv[k:j + 1]]))
    placed_in = isinstance(inline, Placed) and all(sp.path == child_path for _, sp in inline.segs)
    got, _ = _follow(reader, child_text, child_path, child_environ, {**exported, **env_out}, child_args,
                     [*hops, hop], claims, depth=depth + 1,
                     base=0 if inline is None else inline if placed_in else None)
    if got is None or got.command is None:
        return None
    if inline is not None:  # bash -c "...": the string's lines count from the command's
        c = got.command
        got.command = Command(argv=c.argv, env=c.env, line=cmd.line + c.line - 1, path=cmd.path or path)
    c = got.command
    got.command = Command(argv=[*prefix, *c.argv], env=c.env, line=c.line, path=c.path or got.path)
    return got
