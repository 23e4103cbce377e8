"""One registry binds a contract's workload.adapter to its adapter class and to the contract's folder."""

import json

import pytest

from infrarsi.adapters import ADAPTERS, Adapter, adapter_class, contract_adapter, get_adapter, run_adapter


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_every_adapter_is_bound_to_the_contract_folder(name, tmp_path):
    (tmp_path / "c.toml").write_text("")
    ad = contract_adapter(name, tmp_path / "c.toml")
    assert isinstance(ad, Adapter) and ad.name == name and isinstance(ad, adapter_class(name))
    assert ad.base_dir == tmp_path.resolve()
    assert get_adapter(name).base_dir is None  # unbound: launch files relative to the working directory


def test_a_locked_run_binds_to_the_locked_contract(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "contract.lock").write_text(json.dumps({"contract_path": str(tmp_path / "sub" / "c.toml")}))
    assert run_adapter("megatron", tmp_path / "run").base_dir == tmp_path / "sub"
    assert run_adapter("megatron", tmp_path / "no-run").base_dir is None


def test_an_unknown_adapter_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown adapter 'deepspeed'; use one of minigpt, megatron, torchtitan, simulated"):
        get_adapter("deepspeed")
