"""make_executor: the environment a user sets shapes the executor, and a bad value is one line naming it."""

import pytest

from infrarsi.errors import SettingError, explain
from infrarsi.execute import make_executor
from infrarsi.trial import LaunchSpec


def test_slurm_partition_and_sbatch_options_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("INFRARSI_SLURM_PARTITION", "gpu-h100")
    monkeypatch.setenv("INFRARSI_SLURM_ARGS", "--account=ml --gres=gpu:8 '--constraint=h100&ib'")
    monkeypatch.setenv("INFRARSI_ISOLATION", "off")
    ex = make_executor("slurm")
    assert ex.config.partition == "gpu-h100"
    assert ex.config.extra_args == ["--account=ml", "--gres=gpu:8", "--constraint=h100&ib"]
    script = ex.script(LaunchSpec(argv=["python", "-c", "pass"]), tmp_path / "t", token="tok")
    for line in ("#SBATCH --partition=gpu-h100", "#SBATCH --account=ml", "#SBATCH --gres=gpu:8",
                 "#SBATCH --constraint=h100&ib"):
        assert line in script.splitlines(), script


@pytest.mark.parametrize("var, value, says", [
    ("INFRARSI_SLURM_ARGS", "-A ml", "'ml' is not one sbatch option"),
    ("INFRARSI_SLURM_ARGS", "--account='ml", "does not split into shell words"),
    ("INFRARSI_SLURM_ARGS", "'--comment=a\nsrun rm -rf /'", "is not one sbatch option"),
    ("INFRARSI_SLURM_PARTITION", "gpu\n#SBATCH --exclusive", "is not a partition name"),
    ("INFRARSI_ISOLATION", "maybe", "set it to on (default) or off"),
])
def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch, var, value, says):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingError, match=var) as e:
        make_executor("slurm")
    assert says in str(e.value) and "\n" not in str(e.value).replace(value, "")
    assert explain(e.value) == str(e.value)  # the command line prints it as it is, no traceback
