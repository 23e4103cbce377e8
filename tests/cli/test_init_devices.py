"""`infrarsi init` holds hardware.devices to the ranks the launch file starts (its nodes x processes per node):
a contract that says 8 devices for a launch of 32 ranks is refused with the arithmetic and the fix."""

import shutil
from pathlib import Path

import pytest

from infrarsi import exitcodes

from .test_cli import invoke

FIX = Path(__file__).parents[1] / "fixtures"


@pytest.mark.parametrize("fixture, adapter, ranks", [
    ("megatron/mixtral_8x7b.sh", "megatron", 32),
    # torchtitan 0.3's own config check runs in a process of its own (~45 s loaded): the megatron case keeps the rule
    pytest.param("torchtitan/deepseek_v3_16b_hsdp_v03.cmd", "torchtitan", 16, marks=pytest.mark.slow)])
def test_init_refuses_devices_the_launch_does_not_start(tmp_path, fixture, adapter, ranks):
    shutil.copy(FIX / fixture, tmp_path)
    for devices in (8, ranks):
        c = tmp_path / f"c{devices}.toml"
        c.write_text(f'name = "dev{devices}"\n[workload]\nadapter = "{adapter}"\nlaunch = "{Path(fixture).name}"\n'
                     f'[hardware]\nkind = "H100-80GB"\ndevices = {devices}\nmemory_capacity_gib = 80\n')
        r = invoke("init", c, "--run-dir", tmp_path / f"run{devices}")
        if devices == ranks:
            assert r.exit_code == 0, r.output
        else:
            assert r.exit_code == exitcodes.ERROR and not (tmp_path / "run8" / "contract.lock").exists()
            assert (f"hardware.devices = 8, but the launch starts {ranks} ranks (its nodes x processes per node); set "
                    f"hardware.devices = {ranks} in the contract") in " ".join(r.stderr.split()), r.output
