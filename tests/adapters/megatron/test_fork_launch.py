"""A fork's launch through the commands a team runs: `knobs`, `init`, `estimate` and `apply` give one verdict on its
flags, because each reads the launch through the one check (adapters/megatron/flags.py). Three launches of the
fork in tests/fixtures/megatron_fork/args_fork (its own flags in its megatron/training/arguments.py):

- as written: its flags are its tree's, accepted by all four, and apply leaves them byte for byte;
- with a misspelt flag (or one its tree renamed since the run): refused by all four, in one line naming the flag,
  the nearest known one and the fix;
- without its tree on the path: its flags are not upstream's, so all four warn and go on.

The estimates of the accepted launches (a fake step each, a minute under load) run with ``-m slow``; the refused
one is refused before any step, in the default run."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from infrarsi.testing.recorded_run import write_verified_run

FORK = Path(__file__).resolve().parents[2] / "fixtures" / "megatron_fork" / "args_fork"
CONTRACT = """name = "fork-gpt"
[workload]
adapter = "megatron"
launch = "train.sh"
cwd = "."
[hardware]
kind = "H100-80GB"
devices = 8
memory_capacity_gib = 80
[scope.knobs]
tensor_parallel = [1, 2]
data_parallel = [4, 8]
micro_batch_size = [1, 2]
sequence_parallel = [false, true]
[baseline]
tensor_parallel = 2
data_parallel = 4
micro_batch_size = 1
sequence_parallel = true
"""
CAND = {"tensor_parallel": 1, "data_parallel": 8, "micro_batch_size": 2, "sequence_parallel": False}
FORK_LINES = ("    --attention-sink-tokens 4\n", "    --loss-spike-skip\n")


def invoke(*args):
    from typer.testing import CliRunner

    from infrarsi.cli import _register_tools, app

    _register_tools()
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _project(tmp_path: Path, *, tree: bool, verified: bool) -> tuple[Path, Path]:
    """A git repository holding the fork (with or without its megatron/ tree) and its contract; with ``verified``, a
    verified run of it (real writers) whose winner is CAND. Returns (repository, fork folder)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for a in (("init", "-q"), ("config", "user.name", "T"), ("config", "user.email", "t@example.com"),
              ("config", "commit.gpgsign", "false")):
        _git(repo, *a)
    fork = repo / "fork"
    shutil.copytree(FORK, fork, ignore=None if tree else shutil.ignore_patterns("megatron"))
    (fork / ".gitignore").write_text("run/\n")
    if verified:
        write_verified_run(fork, CONTRACT, CAND)
    else:
        (fork / "contract.toml").write_text(CONTRACT)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the fork and its launch")
    return repo, fork


def _one_line(text: str) -> str:
    """The one line of ``text`` that says the command failed ("error: ..." or "apply refused: ...")."""
    lines = [ln for ln in text.splitlines() if ln.startswith(("error:", "apply refused:"))]
    assert len(lines) == 1, text
    return lines[0]


def test_a_forks_own_flags_are_accepted_by_all_four_and_kept_byte_for_byte(tmp_path):
    repo, fork = _project(tmp_path, tree=True, verified=True)
    for target in (fork / "train.sh", fork / "contract.toml"):
        r = invoke("knobs", target, "--json", "--no-framework-check")
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        assert d["violations"] == [] and d["warnings"] == [] and d["setting"]["tensor_parallel"] == 2
    r = invoke("init", fork / "contract.toml", "--run-dir", tmp_path / "init-run")
    assert r.exit_code == 0 and "warning" not in r.stderr, r.output
    r = invoke("apply", "--run-dir", fork / "run", "--repo", repo)
    assert r.exit_code == 0 and "warning" not in r.stderr, r.output
    text = (fork / "train.sh").read_text()
    assert "--tensor-model-parallel-size 1" in text and "--micro-batch-size 2" in text  # the tuned setting, in place
    assert all(ln in text for ln in FORK_LINES)  # the fork's flags, byte for byte
    assert "fork/train.sh" in _git(repo, "show", "--name-only", "--format=", "HEAD").split()
    moved = [ln for ln in _git(repo, "diff", "HEAD~1", "--", "fork/train.sh").splitlines()
             if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert moved and not any("sink" in ln or "spike" in ln for ln in moved), moved  # only the tuned knobs moved


def _refused_by(commands: dict[str, tuple], verdict: str) -> None:
    for name, args in commands.items():
        r = invoke(*args)
        assert r.exit_code == 1, (name, r.output)
        said = _one_line(r.stderr)  # one line, naming the flag, its nearest known one and the fix
        assert verdict in said, (name, said)


def test_a_misspelt_flag_beside_a_tree_is_refused_in_the_same_line_before_anything_is_locked(tmp_path):
    repo, fork = _project(tmp_path, tree=True, verified=False)
    script = fork / "train.sh"
    script.write_text(script.read_text().replace("--loss-spike-skip", "--loss-spike-skp"))
    _refused_by({"knobs": ("knobs", script, "--no-framework-check"),
                 "knobs (contract)": ("knobs", fork / "contract.toml", "--no-framework-check"),
                 "init": ("init", fork / "contract.toml", "--run-dir", tmp_path / "init-run"),
                 "estimate": ("estimate", fork / "contract.toml")},
                "pretrain_gpt.py does not know --loss-spike-skp (did you mean --loss-spike-skip?): it would exit with "
                f"\"unrecognized arguments\" before training (its parser: {fork}/megatron/training/arguments.py); fix "
                "the spelling or remove the flag")
    assert not (tmp_path / "init-run").exists()  # nothing locked


def test_a_flag_the_tree_renamed_after_the_run_is_refused_by_all_four_apply_included(tmp_path):
    """The lock seals the launch file, so apply meets a flag its tree no longer knows when the tree changes: the
    fork renamed --loss-spike-skip after the run. Every command judges the launch against the tree as it is now."""
    repo, fork = _project(tmp_path, tree=True, verified=True)
    args_py = fork / "megatron" / "training" / "arguments.py"
    args_py.write_text(args_py.read_text().replace("'--loss-spike-skip'", "'--loss-spike-skips'"))
    _git(repo, "commit", "-q", "-am", "the fork renames its flag")
    before = (fork / "train.sh").read_text()
    _refused_by({"knobs": ("knobs", fork / "train.sh", "--no-framework-check"),
                 "knobs (contract)": ("knobs", fork / "contract.toml", "--no-framework-check"),
                 "init": ("init", fork / "contract.toml", "--run-dir", tmp_path / "init-run"),
                 "estimate": ("estimate", fork / "contract.toml"),
                 "apply": ("apply", "--run-dir", fork / "run", "--repo", repo)},
                "pretrain_gpt.py does not know --loss-spike-skip (did you mean --loss-spike-skips?): it would exit with "
                f"\"unrecognized arguments\" before training (its parser: {args_py});")
    assert (fork / "train.sh").read_text() == before and not (tmp_path / "init-run").exists()  # nothing written


def test_without_its_tree_a_forks_flags_are_warned_about_by_all_four_and_kept(tmp_path):
    repo, fork = _project(tmp_path, tree=False, verified=True)
    warning = ("pretrain_gpt.py may not know --attention-sink-tokens (did you mean --attention-backend?), "
               "--loss-spike-skip (did you mean --loss-scale or --loss-scale-window?): no Megatron tree was found on "
               "the launch's path")
    r = invoke("knobs", fork / "train.sh", "--json", "--no-framework-check")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["violations"] == [] and len(d["warnings"]) == 1 and warning in d["warnings"][0]
    r = invoke("knobs", fork / "train.sh", "--no-framework-check")
    assert r.exit_code == 0 and warning in r.stdout.replace("\n", " "), r.output
    r = invoke("init", fork / "contract.toml", "--run-dir", tmp_path / "init-run")
    assert r.exit_code == 0 and warning in r.stderr, r.output
    r = invoke("apply", "--run-dir", fork / "run", "--repo", repo)
    assert r.exit_code == 0 and warning in r.stderr, r.output
    assert all(ln in (fork / "train.sh").read_text() for ln in FORK_LINES)


@pytest.mark.slow
@pytest.mark.parametrize("tree", [True, False], ids=["its tree", "no tree"])
def test_the_estimate_accepts_a_forks_launch_and_names_the_flags_it_does_not_account_for(tmp_path, tree):
    """~60 s each under load (a fake step); the verdicts themselves are covered by the default tests above."""
    _, fork = _project(tmp_path, tree=tree, verified=False)
    r = invoke("estimate", fork / "contract.toml", "--json")
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    assert "flags not modelled (their memory is not estimated): --attention-sink-tokens --loss-spike-skip" in notes
    warned = [n for n in notes if "may not know --attention-sink-tokens (did you mean" in n]
    assert len(warned) == (0 if tree else 1), notes


def test_a_fork_adding_its_flags_through_extra_args_provider_is_locked_by_init_as_written(tmp_path):
    """tests/fixtures/megatron_fork/provider_fork: no tree on its path, its flags from its script's provider; init
    locks it with no warning, and a typo in them is a warning (no tree to refuse it by), shown by knobs and init."""
    provider = FORK.parent / "provider_fork"
    fork = tmp_path / "fork"
    shutil.copytree(provider, fork)
    root = Path(__file__).resolve().parents[3]
    (fork / "contract.toml").write_text(
        f'name = "provider-fork"\n[workload]\nadapter = "megatron"\nlaunch = "train.sh"\ncwd = "."\n'
        f'[workload.script_env]\nREPO = "{root}"\n[hardware]\nkind = "cpu"\ndevices = 2\nmemory_capacity_gib = 3.0\n'
        '[scope.knobs]\npipeline_parallel = [1, 2]\ndata_parallel = [1, 2]\n'
        '[baseline]\npipeline_parallel = 2\ndata_parallel = 1\n')
    r = invoke("init", fork / "contract.toml", "--run-dir", tmp_path / "run")
    assert r.exit_code == 0 and "warning" not in r.stderr, r.output
    script = fork / "train.sh"
    script.write_text(script.read_text().replace("--log-grad-histograms", "--log-grad-histogram"))
    warning = "pretrain_gpt.py may not know --log-grad-histogram (did you mean --log-grad-histograms?)"
    r = invoke("knobs", fork / "contract.toml", "--json", "--no-framework-check")
    assert r.exit_code == 0 and warning in json.loads(r.stdout)["warnings"][0], r.output
    r = invoke("init", fork / "contract.toml", "--run-dir", tmp_path / "run2")
    assert r.exit_code == 0 and warning in r.stderr, r.output
