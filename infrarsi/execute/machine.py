"""The machine's folders a boxed process sees, read-only: allowlists all (see docs/isolation.md).

    machine_options()        # bwrap options: /usr /bin /lib* /sys, and of /etc only ETC_SHOWN
    opt_paths(os.environ)    # the folders of /opt the environment names (a CUDA or a conda installed there)

ETC_SHOWN was measured: strace around real minigpt, torchtitan and megatron-core CPU trials and Slurm's clients;
each entry says why a trial may need it. Nothing else of /etc or /opt exists inside.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# The machine a process sees, read-only; nothing else of it exists inside (no /home, /srv, /mnt, /var, /run).
MACHINE = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
# Of /etc, only what a Python, torch (gloo), NCCL and Slurm-client process reads (traced: docs/isolation.md), each
# for its reason; nothing else of /etc exists inside (no keytab, VPN config, /etc/environment, profile.d, slurmdbd.conf).
ETC_SHOWN = {
    "/etc/ld.so.cache": "the dynamic linker's index: every program and shared library loads through it",
    "/etc/ld.so.conf": "the dynamic linker's folders (ldconfig -p, ctypes.util.find_library)",
    "/etc/ld.so.conf.d": "the same, per package (CUDA's and NCCL's library folders)",
    "/etc/nsswitch.conf": "how names resolve (users, hosts): getpwuid, getaddrinfo",
    "/etc/passwd": "the user's name and home from its uid (getpass.getuser, torch's cache paths, ssh-less tools)",
    "/etc/group": "group names (Slurm clients, os.getgrouplist)",
    "/etc/hosts": "localhost and the node's own name: torchrun's rendezvous, gloo, NCCL bootstrap",
    "/etc/host.conf": "the resolver's options (read with /etc/hosts)",
    "/etc/resolv.conf": "the resolver (getaddrinfo of the node's hostname; Slurm clients)",
    "/etc/gai.conf": "getaddrinfo's address order (IPv4/IPv6 for MASTER_ADDR)",
    "/etc/services": "port names (socket.getservbyname)",
    "/etc/protocols": "protocol names (socket.getprotobyname)",
    "/etc/hostname": "the node's name",
    "/etc/localtime": "the time zone of log time stamps",
    "/etc/timezone": "the same, by name",
    "/etc/alternatives": "/usr/bin/cc, c++ and awk link here: Triton and inductor compile their launchers with cc",
    "/etc/ssl/certs": "public CA certificates (a TLS client: the hub, wandb; offline in trials, read at import)",
    "/etc/ssl/openssl.cnf": "OpenSSL's configuration (read when Python's ssl module starts)",
    "/etc/ca-certificates.conf": "which CA certificates are trusted",
    "/etc/mime.types": "Python's mimetypes (read on first use)",
    "/etc/os-release": "the OS's name (platform.freedesktop_os_release, torch.utils.collect_env)",
    "/etc/debian_version": "the same, on Debian",
    "/etc/lsb-release": "the same, on Ubuntu",
    "/etc/nccl.conf": "NCCL's own defaults file (NCCL_* settings for the node)",
    "/etc/mtab": "mounted file systems (a link to /proc/mounts: the box's own)",
    "/etc/slurm/slurm.conf": "a Slurm client's cluster configuration (no secret: the key and the database's are apart)",
    "/etc/slurm/plugstack.conf": "a Slurm client's SPANK plugins (srun reads it)",
    "/etc/slurm/plugstack.conf.d": "the same, per plugin",
}


def machine_options() -> list[str]:
    """The machine's folders, read-only (a link such as /bin -> usr/bin as the same link), and of /etc only
    ETC_SHOWN: each where it exists (``--ro-bind-try``: a Slurm node's /etc may lack one), a link into the box's
    own folders as the same link (/etc/localtime, /etc/mtab), any other link as its target's content."""
    out = []
    for m in MACHINE:
        if os.path.islink(m):
            out += ["--symlink", os.readlink(m), m]
        elif os.path.isdir(m):
            out += ["--ro-bind", m, m]
    inside = ("/usr/", "/proc/", "/etc/")
    for e in ETC_SHOWN:
        target = os.path.join(os.path.dirname(e), os.readlink(e)) if os.path.islink(e) else None
        if target is not None and os.path.normpath(target).startswith(inside):
            out += ["--symlink", os.readlink(e), e]
        else:
            out += ["--ro-bind-try", e, e]
    return out


def etc_shown() -> list[Path]:
    """The ETC_SHOWN paths that exist here."""
    return [Path(e) for e in ETC_SHOWN if os.path.lexists(e)]


OPT_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "VIRTUAL_ENV", "NCCL_HOME",
           "CUDNN_HOME")  # variables whose folders a process loads programs and libraries from


def opt_paths(env: Mapping[str, str]) -> list[Path]:
    """Folders under /opt that the environment names (a CUDA or a conda in /opt on PATH, LD_LIBRARY_PATH,
    CUDA_HOME, ...): shown read-only; nothing else of /opt is."""
    out = []
    for k in OPT_ENV:
        for item in env.get(k, "").split(os.pathsep):
            q = Path(os.path.abspath(item)) if item.startswith("/") else None
            if q is not None and q.parts[:2] == ("/", "opt") and len(q.parts) > 2 and q.is_dir():
                out.append(q)
    return list(dict.fromkeys(out))
