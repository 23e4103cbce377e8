"""init locks the contract; every later stage refuses a lock whose contract changed; the workload is fixed."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.contract import ContractError, load_contract, load_locked, write_lock
from infrarsi.contract.invariants import loss_violation, setting_violations
from infrarsi.contract.lock import normalized

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "contracts" / "minigpt-cpu.toml"


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "infrarsi.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd)


@pytest.fixture
def contract(tmp_path):
    p = tmp_path / "c.toml"
    shutil.copy(DEFAULT, p)
    return p


def test_init_writes_a_lock_with_the_hash(contract, tmp_path):
    r = cli("init", contract, "--run-dir", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    lock = json.loads((tmp_path / "run" / "contract.lock").read_text())
    assert len(lock["sha256"]) == 64
    assert lock["contract"]["workload"]["args"]["global_batch_size"] == 16
    assert load_locked(tmp_path / "run").name == "minigpt-cpu"


def test_an_edited_contract_is_refused_naming_the_change(contract, tmp_path):
    write_lock(contract, tmp_path / "run")
    contract.write_text(contract.read_text().replace("global_batch_size = 16", "global_batch_size = 32"))
    with pytest.raises(ContractError, match=r"workload\.args\.global_batch_size 16 -> 32"):
        load_locked(tmp_path / "run")
    r = cli("doctor", "--run-dir", tmp_path / "run")
    assert r.returncode != 0 and "global_batch_size 16 -> 32" in r.stderr.replace("\n", "")


def test_an_edited_lock_is_refused(contract, tmp_path):
    _, lock = write_lock(contract, tmp_path / "run")
    body = json.loads(lock.read_text())
    body["contract"]["budget"]["max_trials"] = 1000
    lock.write_text(json.dumps(body))
    with pytest.raises(ContractError, match="edited by hand"):
        load_locked(tmp_path / "run")


def test_a_setting_may_not_change_the_workload(contract):
    c = load_contract(contract)
    assert setting_violations(c, {"micro_batch_size": 4}) == []
    (msg,) = setting_violations(c, {"global_batch_size": 32})
    assert "fixed workload argument global_batch_size" in msg and "16" in msg


def test_scope_may_not_name_a_fixed_argument(contract):
    contract.write_text(contract.read_text().replace("[scope.knobs]", "[scope.knobs]\nseq_length = [128, 256]"))
    with pytest.raises(ContractError, match=r"seq_length.*cannot be tuned"):
        load_contract(contract)


def test_bad_contract_errors_name_the_field(contract):
    contract.write_text(contract.read_text().replace("memory_capacity_gib = 0.75", "memory_capacity_gb = 0.75"))
    with pytest.raises(ContractError) as e:
        load_contract(contract)
    assert "hardware.memory_capacity_gb: unknown key" in str(e.value)
    assert "hardware.memory_capacity_gib: required" in str(e.value)


def test_a_negative_startup_allowance_is_refused_in_one_line_naming_the_field(contract):
    """invariants.timing.startup_allowance_s: seconds of extra start-up a setting may spend (execute/end_to_end.py);
    negative (or NaN) is refused on one line that names it and says what it takes; 0 is the default."""
    assert load_contract(contract).invariants.timing.startup_allowance_s == 0
    # at its default it is left out of the lock's contract and its hash: a run locked before the field resumes
    default = normalized(load_contract(contract))
    assert "startup_allowance_s" not in default["invariants"]["timing"], default["invariants"]["timing"]
    text = contract.read_text()
    for bad in ("-5", "nan"):
        contract.write_text(text.replace("[invariants.timing]", f"[invariants.timing]\nstartup_allowance_s = {bad}"))
        with pytest.raises(ContractError) as e:
            load_contract(contract)
        msg = str(e.value)
        assert "\n" not in msg and "invariants.timing.startup_allowance_s: is " in msg and "0 or more" in msg, msg
    contract.write_text(text.replace("[invariants.timing]", "[invariants.timing]\nstartup_allowance_s = 45"))
    assert normalized(load_contract(contract))["invariants"]["timing"]["startup_allowance_s"] == 45.0


def test_loss_invariant_shows_the_arithmetic(contract):
    c = load_contract(contract)
    base = [6.4, 6.2, 6.0, 5.7, 5.5, 5.3, 5.1, 4.9, 4.8, 4.6]  # compare_steps = 10
    assert loss_violation(c, base, [x * 1.001 for x in base]) is None
    msg = loss_violation(c, base, [6.4, 6.2, 6.5, *base[3:]])
    assert "iteration 3" in msg and "rtol 0.02" in msg


def test_help_lists_the_stages():
    r = cli("--help")
    assert r.returncode == 0
    for stage in ("init", "doctor", "run", "report", "apply", "tune"):
        assert stage in r.stdout


def test_workload_adapter_must_be_a_registered_framework_named_on_one_line(contract, tmp_path):
    """workload.adapter is typed by its form in contract/ (below adapters/); the names it may take are the registry's,
    handed in where the contract is loaded at the edge (``infrarsi init``, ``Workload.of_file``)."""
    from infrarsi.adapters.registry import SPECS
    from infrarsi.adapters.workload import Workload

    assert load_contract(contract, adapters=SPECS).workload.adapter == "minigpt"
    with pytest.raises(ContractError, match=r"workload\.adapter: 'minigpt' is no registered adapter; use one of 'x'$"):
        load_contract(contract, adapters=["x"])
    text = contract.read_text()
    contract.write_text(text.replace('adapter = "minigpt"', 'adapter = "deepspeed"'))
    r = cli("init", contract, "--run-dir", tmp_path / "run")
    names = [repr(n) for n in SPECS]
    want = f"workload.adapter: 'deepspeed' is no registered adapter; use one of {', '.join(names[:-1])} or {names[-1]}"
    assert r.returncode == 1 and want in " ".join(r.stderr.split()), r.stderr
    assert not (tmp_path / "run" / "contract.lock").exists()
    with pytest.raises(ContractError, match="'deepspeed' is no registered adapter"):
        Workload.of_file(contract)
    contract.write_text(text.replace('adapter = "minigpt"', 'adapter = "mini gpt"'))
    with pytest.raises(ContractError, match=r"workload\.adapter: 'mini gpt' is no adapter name"):
        load_contract(contract)  # its form is checked without the registry's names too
