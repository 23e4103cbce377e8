"""Holes 3 (scope at init), 4 and 7 (typed, injection-free knob values), 5 (the whole workload locked) and 10
(messages): refused at `infrarsi init` or at the next stage, with one line naming what was tampered with."""

import json
import shutil
from pathlib import Path

import pytest

from .conftest import ROOT, tiny

FIX = ROOT / "tests" / "fixtures"
KERNEL_FILE = "kernels/rmsnorm/triton_rows.py"
KERNEL = f"{KERNEL_FILE}@rows4"  # one of the file's VARIANTS


def _project_with_kernel(project: Path) -> None:
    (project / "kernels/rmsnorm").mkdir(parents=True)
    shutil.copy(ROOT / KERNEL_FILE, project / KERNEL_FILE)


def _init(cli, project, text, name="c.toml"):
    (project / name).write_text(text)
    return cli("init", name, "--run-dir", "run")


# ------------------------------------------------------------------------------------------ scope (3)
def test_init_refuses_a_kernel_outside_scope_files(cli, project):
    (project / "elsewhere").mkdir()
    shutil.copy(ROOT / KERNEL_FILE, project / "elsewhere" / "rms.py")
    r = _init(cli, project, tiny(knobs='kernel_rmsnorm = ["elsewhere/rms.py"]'))
    assert r.returncode == 1 and "scope.knobs.kernel_rmsnorm names 'elsewhere/rms.py'" in r.err
    assert "scope.files ['kernels/**/*.py'] does not take" in r.err and not (project / "run").exists()


def test_init_refuses_a_kernel_that_climbs_out_with_dotdot(cli, project):
    r = _init(cli, project, tiny(knobs='kernel_rmsnorm = ["kernels/../../etc/passwd"]'))
    assert r.returncode == 1 and "kernels/../../etc/passwd" in r.err and "'..'" in r.err


def test_init_refuses_a_symlink_in_the_scope_that_leaves_it(cli, project, tmp_path):
    (project / "kernels/rmsnorm").mkdir(parents=True)
    outside = tmp_path / "outside.py"
    shutil.copy(ROOT / KERNEL_FILE, outside)
    (project / "kernels/rmsnorm/link.py").symlink_to(outside)
    r = _init(cli, project, tiny(knobs='kernel_rmsnorm = ["kernels/rmsnorm/link.py"]'))
    assert r.returncode == 1 and "a symlink that leaves the repository" in r.err, r.stderr


def test_init_takes_a_kernel_inside_the_scope(cli, project):
    _project_with_kernel(project)
    r = _init(cli, project, tiny(knobs=f'kernel_rmsnorm = ["{KERNEL}"]'))
    assert r.returncode == 0, r.stderr


def test_init_refuses_a_variant_the_file_does_not_declare(cli, project):
    """The scope takes the file (PATH of PATH@VARIANT); the variant must be one of the file's VARIANTS."""
    _project_with_kernel(project)
    r = _init(cli, project, tiny(knobs=f'kernel_rmsnorm = ["{KERNEL}", "{KERNEL_FILE}@rows8"]'))
    assert r.returncode == 1 and not (project / "run").exists(), r.stderr
    assert f"scope.knobs.kernel_rmsnorm: kernel candidate '{KERNEL_FILE}@rows8'" in r.err
    assert "has no variant 'rows8'; use one of rows4, rows16" in r.err


@pytest.mark.parametrize("name", ["../escape", "a/b", ".."])
def test_a_contract_name_is_one_path_component(cli, project, name):
    r = _init(cli, project, tiny().replace('name = "tiny"', f'name = "{name}"'))
    assert r.returncode == 1 and "becomes a folder name" in r.err, r.stderr


def test_apply_refuses_to_write_through_a_symlink_in_the_scope(recorded, repo_factory, cli, tmp_path):
    repo = repo_factory()
    victim = tmp_path / "victim.py"
    victim.write_text("precious\n")
    (repo / "kernels/rmsnorm").mkdir(parents=True)
    (repo / KERNEL_FILE).symlink_to(victim)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a symlinked kernel")
    r = cli("apply", "--run-dir", recorded, "--repo", repo)
    assert r.returncode == 1 and "unsafe destination" in r.err and "outside the repository" in r.err, r.stderr
    assert victim.read_text() == "precious\n" and not (repo / "infrarsi-tuned").exists()


# ------------------------------------------------------------------------------ types, injection (4, 7)
def test_a_float_for_an_int_knob_is_refused_at_init(cli, project):
    r = _init(cli, project, tiny(baseline="micro_batch_size = 4.0"))
    assert r.returncode == 1 and "micro_batch_size=4.0 is a float" in r.err and "write 4" in r.err, r.stderr
    r = _init(cli, project, tiny().replace("micro_batch_size = [1, 2, 4]", "micro_batch_size = [1, 2, 4.0]"))
    assert r.returncode == 1 and "micro_batch_size=4.0 is a float" in r.err, r.stderr


def test_a_newline_in_a_knob_value_is_refused_at_init(cli, project):
    _project_with_kernel(project)
    for knobs in ('attention_backend = ["auto", "1\\ntouch PWNED; #"]',
                  'kernel_rmsnorm = ["kernels/rmsnorm/x.py\\ntouch PWNED; #"]',
                  'attention_backend = ["auto\\u0000"]'):
        r = _init(cli, project, tiny(knobs=knobs))
        assert r.returncode == 1 and ("contains a newline" in r.err or "contains a NUL" in r.err), (knobs, r.stderr)
        assert len(r.stderr.strip().splitlines()) <= 3  # one message (rich wraps it at the terminal width)
    assert not (project / "PWNED").exists() and not (project / "run").exists()


def test_an_injected_value_cannot_reach_a_script_through_apply(recorded, repo_factory, cli):
    """A candidate setting with a shell line in a knob value, sealed by a key holder: apply refuses it."""
    from infrarsi.testing.sealed import rewrite_sealed

    repo = repo_factory()
    ver = json.loads((recorded / "verification.json").read_text())
    for c in ver["candidates"]:
        c["setting"]["attention_backend"] = "auto\ntouch PWNED; #"
    rewrite_sealed(recorded, "verification.json", json.dumps(ver))
    r = cli("apply", "--run-dir", recorded, "--repo", repo)
    assert r.returncode == 1 and "apply refused" in r.err, r.stderr
    assert not (repo / "infrarsi-tuned").exists()
    assert not any("touch PWNED" in p.read_text(errors="ignore") for p in repo.rglob("*.sh"))


# --------------------------------------------------------------------------- the whole workload (5)
def _megatron(project):
    shutil.copy(FIX / "megatron/gpt3_175b.sh", project / "launch.sh")
    # the script takes its paths as positional arguments ($1..$5): the contract passes them
    (project / "c.toml").write_text('name = "mt"\n[workload]\nadapter = "megatron"\nlaunch = "launch.sh"\n'
                                    'script_args = ["ckpt", "tb", "vocab.json", "merges.txt", "data_text_document"]\n'
                                    '[hardware]\nkind = "H100-80GB"\ndevices = 128\nmemory_capacity_gib = 80\n')  # its 128 ranks


def test_an_edited_launch_script_is_refused_naming_it(cli, project):
    _megatron(project)
    r = cli("init", "c.toml", "--run-dir", "run")
    assert r.returncode == 0, r.stderr
    assert "launch.sh" in json.loads((project / "run/contract.lock").read_text())["files"]
    script = project / "launch.sh"
    script.write_text(script.read_text().replace("--global-batch-size", "--global-batch-size 64 --ignored"))
    r = cli("doctor", "--run-dir", "run")
    assert r.returncode == 1 and f"workload file {script.resolve()} changed since it was locked" in r.err, r.stderr
    assert not (project / "run/trials").exists()


# ------------------------------------------------------------------------------------- messages (10)
def test_the_fix_hint_in_brackets_survives_rich_markup(cli, project):
    r = _init(cli, project, tiny(knobs="seq_length = [16, 32]"))
    assert r.returncode == 1 and "set them under [workload.args]" in r.err, r.stderr


def test_a_lock_only_edit_blames_the_lock(cli, project):
    from infrarsi.contract.lock import contract_hash, normalized
    from infrarsi.contract.model import Contract

    assert _init(cli, project, tiny()).returncode == 0
    lock_path = project / "run/contract.lock"
    lock = json.loads(lock_path.read_text())
    lock["contract"]["budget"]["max_trials"] = 1000
    lock["sha256"] = contract_hash(Contract.model_validate(lock["contract"]))  # re-hashed to look consistent
    lock["contract"] = normalized(Contract.model_validate(lock["contract"]))
    lock_path.write_text(json.dumps(lock))
    r = cli("doctor", "--run-dir", "run")
    assert r.returncode == 1 and "contract.lock was edited by hand" in r.err and "the lock, not the contract" in r.err
    assert "c.toml changed" not in r.err


@pytest.mark.parametrize("args, value", [("", "0.01"), ("weight_decay = 0.1", "0.1")])
def test_a_locked_argument_proposed_as_a_knob_names_its_value(cli, project, args, value):
    text = tiny(knobs="weight_decay = [0.0, 0.1]")
    if args:
        text = text.replace("seed = 1 }", f"seed = 1, {args} }}")
    r = _init(cli, project, text)
    assert r.returncode == 1 and "weight_decay" in r.err and value in r.err and "unknown" not in r.err, r.stderr
    assert "locked" in r.err


def _git(repo, *args):
    import subprocess

    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo_factory(tmp_path):
    def make():
        r = tmp_path / "user-repo"
        r.mkdir()
        _git(r, "init", "-q")
        _git(r, "config", "user.name", "Test User")
        _git(r, "config", "user.email", "test@example.com")
        _git(r, "config", "commit.gpgsign", "false")
        (r / "README.md").write_text("training code\n")
        _git(r, "add", "README.md")
        _git(r, "commit", "-q", "-m", "initial")
        return r
    return make
