"""Every command a user copies from README.md and docs/*.md runs, as written, in a fresh copy of the repository.

The commands are the fenced shell blocks (```bash, ```sh, ```shell, ```console, and the `$ ` lines of a ```text
block). Each block runs in its own sandbox: a git repository holding copies of contracts/, kernels/ and launchers/
(what a clone has besides the package, which the test's interpreter already has), with an empty experience bank.
A block that assumes the user's own files or an earlier step gets a :class:`Scene` below: which shipped file stands
for each placeholder (``contract.toml``, ``my_megatron_launch.sh``), the steps run first, and, where the command as
written takes minutes, a smaller budget (``--max-trials``). Each command must exit 0, or 3 for the verbs whose
documented outcome it is ("finished without a promotion", docs/cli.md).

A block that cannot run here carries, on the line before its fence, ``<!-- not run here: WHY -->``; the test reads
it and requires a reason. A block neither marked nor given a scene runs as written in the bare sandbox, so a new
command in the docs is run without editing this file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = ("bash", "sh", "shell", "console")
NOT_RUN = re.compile(r"^<!--\s*not run here:\s*(.*?)\s*-->$")
VERBS_WITH_NO_PROMOTION = re.compile(r"^infrarsi (tune|run|apply|doctor)\b")  # exit 3: docs/cli.md#exit-codes


@dataclass(frozen=True)
class Block:
    doc: str  # relative to the repository root
    line: int  # the fence's line, 1-based
    commands: tuple[str, ...]
    not_run: str | None  # the marker's reason; None: run

    @property
    def key(self) -> tuple[str, str]:
        return self.doc, self.commands[0]

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks() -> list[Block]:
    out = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = re.match(r"^\s*```(\w*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            end = next((j for j in range(i + 1, len(lines)) if re.match(r"^\s*```\s*$", lines[j])), len(lines))
            body, lang = lines[i + 1:end], m.group(1)
            if lang in SHELL_FENCES:
                cmds = [ln.strip().removeprefix("$ ") for ln in body if ln.strip() and not ln.strip().startswith("#")]
            elif lang in ("text", ""):
                cmds = [ln.strip()[2:] for ln in body if ln.strip().startswith("$ ")]
            else:
                cmds = []
            cmds = [re.sub(r"\s+#\s.*$", "", c) for c in cmds]  # the docs' trailing comments
            if cmds:
                prev = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
                mark = NOT_RUN.match(prev)
                out.append(Block(str(path.relative_to(ROOT)), i + 1, tuple(cmds), mark.group(1) if mark else None))
            i = end + 1
    return out


@dataclass(frozen=True, kw_only=True)
class Scene:
    """What a block assumes besides a fresh clone."""

    files: dict[str, str] = field(default_factory=dict)  # placeholder -> the shipped file standing for it
    repos: tuple[str, ...] = ()  # placeholder folders that are the user's git repositories
    before: tuple[str, ...] = ()  # commands run first: the state the block starts from
    smaller: tuple[tuple[str, str], ...] = ()  # (pattern, replacement) on its commands: a smaller budget
    slow: str = ""  # why the block belongs to the slow run ("": the default run)


SIM = "contracts/sim-dense8b-h100x8.toml"  # the simulated 8 x H100 job: each trial a second on the CPU

SCENES: dict[tuple[str, str], Scene] = {
    # README: "what a run looks like on screen", captured with 6 trials; 2 here
    ("README.md", "infrarsi tune sim-dense8b-h100x8.toml --max-trials 6"): Scene(
        files={"sim-dense8b-h100x8.toml": SIM}, smaller=((r"--max-trials 6", "--max-trials 2"),),
        slow="a whole tune (doctor, 2 trials, verification, report, apply): ~25 s idle, ~100 s at load 14; the "
             "default run's tests/referee/test_derived_knobs.py tunes a simulated contract through the CLI"),
    # README: before locking, look at the launch and estimate the contract (minigpt: the estimate runs its model)
    ("README.md", "infrarsi knobs my_megatron_launch.sh"): Scene(
        files={"my_megatron_launch.sh": "contracts/megatron-cpu/train.sh", "contract.toml": "contracts/minigpt-cpu.toml"},
        slow="megatron's argument parser and minigpt's fake step: ~20 s idle, ~110 s at load 14; the default run's "
             "tests/adapters/test_workload.py runs `infrarsi knobs` and tests/estimate/test_minigpt.py `infrarsi "
             "estimate` on minigpt-cpu"),
    # README: the verbs one by one on the user's contract and repository
    ("README.md", "infrarsi init contract.toml --run-dir .infrarsi/myjob"): Scene(
        files={"contract.toml": SIM}, repos=("path/to/your/repo",),
        smaller=((r"^(infrarsi run --run-dir \S+)", r"\1 --max-trials 2"),),
        slow="the five stages (5 baseline runs, 2 trials, verification): ~25 s idle, minutes under load; the verbs "
             "are run by tests/cli/test_cli.py in the default run"),
    ("docs/running.md", "infrarsi run --run-dir .infrarsi/myjob"): Scene(
        files={"contract.toml": SIM},
        before=("infrarsi init contract.toml --run-dir .infrarsi/myjob", "infrarsi doctor --run-dir .infrarsi/myjob",
                "infrarsi init contract.toml --run-dir .infrarsi/job-s1", "infrarsi doctor --run-dir .infrarsi/job-s1"),
        smaller=((r"^(infrarsi run --run-dir \S+)(\s+--seed 1)?$", r"\1\2 --max-trials 2"),),
        slow="two doctors and three searches: ~40 s idle, minutes under load; a run's resume and --more are the "
             "default run's tests/cli/test_cli.py"),
    ("docs/estimate.md", "infrarsi estimate contracts/llama3-8b-h100x64.toml --set recompute_granularity=none"): Scene(
        slow="a fake step of Llama 3 8B: ~4 min on 2 cores (tests/test_shipped_contracts.py's slow estimates too)"),
    ("docs/estimate.md", "infrarsi estimate contracts/megatron-cpu.toml --set tensor_parallel=1 --set "
                         "sequence_parallel=false --set pipeline_parallel=2 --set data_parallel=1"): Scene(
        slow="fake steps of Llama 3 70B and DeepSeek-V2-Lite: ~5 min each on 2 cores; the CPU contract's estimate is "
             "the default run's tests/estimate/test_megatron.py::test_cli_prints_each_pipeline_stages_peak_for_the_"
             "cpu_contract"),
    # docs/launches.md: a chain as teams write it (Megatron-LM's Slurm shape: sbatch -> srun -> bash -> torchrun)
    ("docs/launches.md", "infrarsi knobs scripts/sbatch_gpt.sh"): Scene(
        files={f"scripts/{n}": f"tests/fixtures/chains/megatron_slurm/scripts/{n}" for n in ("sbatch_gpt.sh",
                                                                                            "train_gpt.sh")},
        slow="megatron's argument parser behind the chain: ~20 s idle, ~100 s at load 14; the default run's "
             "tests/launch/test_chains.py::test_knobs_prints_the_chain_it_followed runs the same command on the same "
             "files"),
    ("docs/torchtitan.md", "torchrun --nproc-per-node 2 launchers/torchtitan_cpu.py --job.config_file "
                           "contracts/torchtitan-cpu/llama3_cpu.toml"): Scene(
        slow="a 2-process torchtitan training: ~20 s idle, ~100 s at load 9; the default run's "
             "tests/adapters/torchtitan/test_real.py trains the same job through the same launcher"),
}

ALL = blocks()
RUN = [b for b in ALL if b.not_run is None]


def _param(b: Block):
    scene = SCENES.get(b.key, Scene())
    return pytest.param(b, scene, id=b.name, marks=[pytest.mark.slow] if scene.slow else [])


def _sandbox(root: Path, scene: Scene) -> dict[str, str]:
    """A fresh clone's files in ``root`` (a git repository), the scene's placeholders; the environment to run in."""
    for d in ("contracts", "kernels", "launchers"):
        shutil.copytree(ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    # the experience bank and Hugging Face's caches are the sandbox's own: a command run by hand (torchtitan's
    # training loads its dataset through HF datasets) writes nothing under the user's home
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "INFRARSI_BANK": str(root.parent / "bank.sqlite"), "HF_HOME": str(root.parent / "hf"),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for name, src in scene.files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / src, root / name)
    for repo in [".", *scene.repos]:
        (root / repo).mkdir(parents=True, exist_ok=True)
        if repo != ".":
            (root / repo / "README").write_text("the user's repository\n")
        for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "clone"]):
            subprocess.run(cmd, cwd=root / repo, env=env, check=True, capture_output=True)
    return env


def _smaller(cmd: str, scene: Scene) -> str:
    for pattern, repl in scene.smaller:
        cmd = re.sub(pattern, repl, cmd)
    return cmd


def _ok_codes(cmd: str) -> set[int]:
    return {0, 3} if VERBS_WITH_NO_PROMOTION.match(cmd) else {0}


@pytest.mark.parametrize("block,scene", [_param(b) for b in RUN])
def test_a_docs_command_block_runs(block, scene, tmp_path):
    root = tmp_path / "clone"
    env = _sandbox(root, scene)
    for cmd in [*scene.before, *(_smaller(c, scene) for c in block.commands)]:
        r = subprocess.run(["bash", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, timeout=1200)
        assert r.returncode in _ok_codes(cmd), (f"{block.name}: `{cmd}` exited {r.returncode}\n"
                                               f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def test_each_block_not_run_here_names_why():
    skipped = [b for b in ALL if b.not_run is not None]
    assert skipped, "the make block and the Slurm cluster's block carry the marker"
    assert [b.name for b in skipped if len(b.not_run.split()) < 4] == []


def test_every_scene_belongs_to_a_block_that_runs():
    """A scene whose block was edited away (or marked not run) would leave its block run bare; none is stale."""
    keys = {b.key for b in RUN}
    assert [k for k in SCENES if k not in keys] == []


def test_the_extraction_finds_the_documented_commands():
    cmds = {c for b in ALL for c in b.commands}
    assert "infrarsi kernels list" in cmds and "make demo" in cmds
    assert "infrarsi tune sim-dense8b-h100x8.toml --max-trials 6" in cmds  # a `$ ` line of a ```text block
