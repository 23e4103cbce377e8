"""Container runtimes in a launch's own srun: which one is the isolation, and on what terms.

A trial's task command may start a container (``srun podman run ... IMAGE python train.py``, pyxis's
``srun --container-image=...``, ``srun apptainer exec IMAGE ...``). What each means for the box (docs/isolation.md
says the same for users):

- **podman** (``podman run``): the container *is* the isolation. It starts from the image's root, in mount, PID,
  IPC and UTS namespaces of its own, without most capabilities, under podman's default seccomp profile with the
  kernel keyring's calls refused too (:func:`write_seccomp_profile`), with only the environment it is given. InfraRSI applies the box's file rules to
  what the launch mounts (:func:`podman_isolation`): every bind mount must be one the box would show (the
  repository, the working directory, the Python environment, what the command names, ``INFRARSI_READABLE``, the
  machine's folders) and read-only; every run directory, ``.git``, the bank, cache and seal key and the home
  folders inside a mount are covered by an empty tmpfs; the trial's ``outputs/`` is mounted writable; the trial's
  environment is passed by name (``--env NAME``, the values stay in the job's environment); a one-node job with no
  network option gets ``--network=none`` (its own loopback). It is refused as isolation (the trial then runs
  recorded unisolated, with the reason) for options that undo that: ``--privileged``, ``--pid=host``, ``--cap-add``,
  a ``seccomp`` security option, ``--env-host``, ``--volumes-from``, a named volume, a writable or unshown mount, a
  device that is not a GPU or RDMA one.
- **docker**: not isolation. dockerd starts the container, outside the Slurm step: a cancelled trial's container
  keeps running, and the socket it needs is root on the node.
- **pyxis / enroot** (``--container-image``, ``enroot start``): not isolation. enroot shares the node's PID
  namespace, network and environment and mounts the home folder unless told not to; a bwrap inside the container
  would need bwrap, the interpreter and the box's paths in the image.
- **apptainer / singularity** (``exec``/``run``): an ordinary command, run inside the box like any other (it
  needs apptainer's unprivileged, user-namespace mode there: a setuid install cannot start under ``no_new_privs``).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from . import isolation
from .executor import create_new

PODMAN_SECCOMP = Path("/usr/share/containers/seccomp.json")  # podman's default profile (containers-common)
PODMAN_RUNTIME = "container: podman"  # a trial record's isolation when podman's container is the box
# podman run options that take no value (``--rm``; a ``--opt=value`` form is read as one word either way)
_PODMAN_FLAGS = {"--rm", "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--init", "--privileged",
                 "--read-only", "--env-host", "--no-hosts", "--no-healthcheck", "--oom-kill-disable", "-q", "--quiet",
                 "--replace", "--rmi", "-P", "--publish-all", "--sig-proxy", "--read-only-tmpfs", "--http-proxy"}
_SHORT_FLAGS = re.compile(r"-[ditPq]+")  # -it, -dit: short flags run together
_MOUNT_OPTIONS = ("-v", "--volume", "--mount", "--tmpfs")
_REFUSED = {"--privileged": "--privileged gives the container the node's devices and every capability",
            "--cap-add": "--cap-add gives back capabilities podman drops",
            "--env-host": "--env-host passes the node's whole environment (secrets included)",
            "--volumes-from": "--volumes-from mounts another container's volumes, which the box cannot check"}
_SAFE_PATH = re.compile(r"[^,:\s]+")  # a path podman's -v/--mount syntax can carry unchanged


@dataclass(frozen=True, kw_only=True)
class PodmanRun:
    """``podman [global options] run [options] IMAGE [COMMAND...]``, split."""

    head: list[str]  # podman, its global options, and "run"
    options: list[str]  # run's options, as written
    image: str
    command: list[str]  # what runs inside (empty: the image's own)


def runtime(command: list[str], srun_options: list[tuple[str, str | None]] = ()) -> str | None:
    """The container runtime a task command (and its srun's options) starts: "podman", "docker", "pyxis",
    "enroot", "apptainer"; None for no container."""
    if any(n.startswith("--container-") for n, _ in srun_options):
        return "pyxis"
    if not command:
        return None
    name = os.path.basename(command[0])
    if name in ("apptainer", "singularity"):
        return "apptainer"
    if name in ("podman", "docker", "enroot"):
        return name
    return None


def split_podman(command: list[str]) -> PodmanRun:
    """``podman ... run ...`` split; ValueError (one line) when it is not a ``podman run`` with an image."""
    try:
        at = command.index("run")
    except ValueError:
        raise ValueError(f"{' '.join(command[:4])}: only `podman run ... IMAGE COMMAND` is run as a trial") from None
    k = at + 1
    while k < len(command) and command[k].startswith("-"):
        w = command[k]
        k += 1 if ("=" in w or w in _PODMAN_FLAGS or _SHORT_FLAGS.fullmatch(w)) else 2
    if k >= len(command):
        raise ValueError(f"`{' '.join(command[:at + 1])}` names no image: write `podman run [options] IMAGE COMMAND`")
    return PodmanRun(head=command[:at + 1], options=command[at + 1:k], image=command[k], command=command[k + 1:])


def program(command: list[str]) -> list[str]:
    """What a task command runs inside its container (``podman run ... IMAGE python t.py`` -> ``python t.py``); the
    command itself when it starts none."""
    kind = runtime(command)
    if kind == "podman":
        try:
            return split_podman(command).command
        except ValueError:
            return command
    if kind == "apptainer" and len(command) > 2 and command[1] in ("exec", "run"):
        k = 2
        while k < len(command) and command[k].startswith("-"):
            k += 1 if "=" in command[k] or k + 1 >= len(command) else 2
        return command[k + 1:]
    return command


def not_isolation(kind: str) -> str | None:
    """Why a runtime's container is not the isolation and cannot run in the box (one line), or None."""
    if kind == "docker":
        return ("docker's daemon starts the container outside the Slurm step (a cancelled trial's container keeps "
                "running) and its socket is root on the node: use podman, or srun without a container")
    if kind in ("pyxis", "enroot"):
        return (f"{kind}'s container shares the node's processes, network and environment and mounts the home folder: "
                f"it is not an isolation InfraRSI counts (use podman, or srun without a container)")
    return None


def _options(opts: list[str]) -> list[tuple[str, str | None]]:
    """podman run's options as (name, value) pairs (``-v a:b`` and ``--volume=a:b`` alike)."""
    out, k = [], 0
    while k < len(opts):
        w = opts[k]
        if "=" in w and w.startswith("--"):
            n, v = w.split("=", 1)
            out.append((n, v))
            k += 1
        elif w in _PODMAN_FLAGS or _SHORT_FLAGS.fullmatch(w):
            out.append((w, None))
            k += 1
        else:
            out.append((w, opts[k + 1] if k + 1 < len(opts) else None))
            k += 2
    return out


def _binds(pairs: list[tuple[str, str | None]]) -> tuple[list[tuple[Path, Path, bool]], list[str]]:
    """((source, destination, read-only) of each bind mount, problems) from -v/--volume/--mount."""
    binds, problems = [], []
    for name, value in pairs:
        if name in ("-v", "--volume") and value:
            parts = value.split(":")
            if not parts[0].startswith("/"):
                problems.append(f"{name} {value}: a named volume is storage the box cannot check; bind a folder instead")
                continue
            dst = parts[1] if len(parts) > 1 else parts[0]
            ro = len(parts) > 2 and "ro" in parts[2].split(",")
            binds.append((Path(parts[0]), Path(dst), ro))
        elif name == "--mount" and value:
            kv = dict((p.split("=", 1) + [""])[:2] for p in value.split(","))
            kind = kv.get("type", "volume")
            if kind == "tmpfs":
                continue
            if kind != "bind":
                problems.append(f"--mount {value}: a {kind} mount is storage the box cannot check; bind a folder instead")
                continue
            src, dst = kv.get("source") or kv.get("src", ""), kv.get("destination") or kv.get("target") or kv.get("dst", "")
            ro = "readonly" in kv or "ro" in kv and kv["ro"] in ("", "true")
            binds.append((Path(src), Path(dst or src), ro))
    return binds, problems


def write_seccomp_profile(path: Path, *, base: Path = PODMAN_SECCOMP) -> str | None:
    """Write podman's default seccomp profile (``base``) with the kernel keyring's calls refused (EPERM) to
    ``path``; None when written, else why not (one line). podman's own profile allows ``keyctl``, and a root
    container shares the node's user keyring: data would pass from one trial to the next through it."""
    try:
        profile = json.loads(base.read_text())
        for rule in profile["syscalls"]:
            if rule.get("action") == "SCMP_ACT_ALLOW":
                rule["names"] = [n for n in rule["names"] if n not in isolation.DENIED_SYSCALLS]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"podman's default seccomp profile {base} could not be read ({type(e).__name__}: {e})"
    profile["syscalls"] = [r for r in profile["syscalls"] if r.get("names")]
    profile["syscalls"].append({"names": list(isolation.DENIED_SYSCALLS), "action": "SCMP_ACT_ERRNO", "errnoRet": 1})
    fd = create_new(path)
    with open(fd, "w") as f:
        json.dump(profile, f)
    return None


def podman_isolation(run: PodmanRun, box: isolation.Box, *, outputs: Path, env_names: list[str], one_node: bool,
                     profile: Path) -> tuple[list[str], str, str | None]:
    """(the options InfraRSI adds to the launch's ``podman run``, the network it gets: "own" or "shared", why the
    container is not the isolation or None). ``box``: the trial's box (its readable, hidden and machine paths are
    the rules for what the container may mount); ``env_names``: the trial's environment, passed by name;
    ``profile``: the seccomp profile :func:`write_seccomp_profile` writes for the trial."""
    pairs = _options(run.options)
    for name, value in pairs:
        if name in _REFUSED:
            return [], "", f"podman run {name}: {_REFUSED[name]}"
        if name == "--pid" and value == "host":
            return [], "", "podman run --pid=host: the container would see and signal the node's processes"
        if name == "--security-opt" and value and value.split("=", 1)[0] in ("seccomp", "seccomp-profile"):
            return [], "", (f"podman run --security-opt {value}: the kernel keyring's calls are refused only by "
                            f"podman's own seccomp profile")
        if name == "--device" and value and not any(fnmatch.fnmatch(value.split(":")[0], p) for p in isolation.DEVICES):
            return [], "", f"podman run --device {value}: only GPU and RDMA devices reach a trial ({', '.join(isolation.DEVICES)})"
    binds, problems = _binds(pairs)
    if problems:
        return [], "", f"podman run {problems[0]}"
    shown = [*box.readable, *(Path(m) for m in isolation.MACHINE)]
    added: list[str] = []
    for src, dst, ro in binds:
        for p in (src, dst):
            if not _SAFE_PATH.fullmatch(str(p)):
                return [], "", f"podman run mounts {str(p)!r}: a path with ',' ':' or a space cannot be checked"
        src = Path(os.path.abspath(src))
        if not isolation._under(src, shown) or isolation._under(src, box.hidden):
            return [], "", (f"podman run mounts {src}, which a trial may not read (the box shows the repository, the "
                            f"working directory, the Python environment, what the command names and INFRARSI_READABLE)")
        if not ro and not isolation._under(src, [outputs]):
            return [], "", (f"podman run mounts {src} writable: a trial writes only its outputs/; mount it read-only "
                            f"(-v {src}:{dst}:ro)")
        for h in [*box.hidden, *isolation.home_folders()]:  # covered inside the container, at its place there
            if isolation._under(h, [src]) and h != src and h.exists():
                inside = dst / h.relative_to(src)
                if not _SAFE_PATH.fullmatch(str(inside)):
                    return [], "", f"podman run mounts {src}, which holds {h}: a path podman's options cannot carry"
                # notmpcopyup: podman would otherwise copy what the tmpfs covers into it
                added += (["--mount", f"type=tmpfs,destination={inside},notmpcopyup"] if h.is_dir()
                          else ["-v", f"/dev/null:{inside}:ro"])
    if not _SAFE_PATH.fullmatch(str(outputs)):
        return [], "", f"the trial's outputs {outputs} cannot be carried by podman's -v syntax (',' ':' or a space)"
    added += ["-v", f"{outputs}:{outputs}", "--security-opt", f"seccomp={profile}"]
    for n in env_names:
        added += ["--env", n]
    names = {n for n, _ in pairs}
    if "--network" in names or "--net" in names:
        value = next(v for n, v in pairs if n in ("--network", "--net"))
        network = "own" if value == "none" else "shared"
    elif one_node:
        added.append("--network=none")
        network = "own"
    else:
        network = "shared"
    return added, network, None
