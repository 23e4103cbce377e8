"""`infrarsi knobs FILE [--json]` on Megatron and torchtitan launches."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infrarsi import cli as infrarsi_cli
from infrarsi.adapters.registry import spec
from infrarsi.knobs.catalog import knobs_for

FIX = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def run():
    if not any(c.name == "knobs" for c in infrarsi_cli.app.registered_commands):
        infrarsi_cli._register_tools()
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(infrarsi_cli.app, ["knobs", *args])

    return invoke


def test_json_megatron(run):
    r = run(str(FIX / "megatron" / "mixtral_8x7b.sh"), "--json")
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1  # exactly one object
    d = json.loads(lines[0])
    assert set(d) == {"framework", "fixed", "setting", "violations", "warnings"} and d["warnings"] == []
    assert d["framework"] == "megatron"
    assert d["fixed"]["num_experts"] == 8 and d["fixed"]["num_layers"] == 32
    assert set(d["setting"]) == {k.name for k in knobs_for(spec("megatron").spelling)}
    assert d["setting"]["expert_parallel"] == 8 and d["setting"]["data_parallel"] == 8
    assert d["setting"]["tp_comm_overlap"] is False and d["setting"]["recompute_granularity"] == "full"
    assert d["violations"] == []


def test_json_defaults_and_unknown_world(run, tmp_path):
    cmd = tmp_path / "bare.sh"
    cmd.write_text("python pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 "
                   "--seq-length 2048 --global-batch-size 32 --tensor-model-parallel-size 3\n")
    d = json.loads(run(str(cmd), "--json").stdout)
    assert d["setting"]["recompute_granularity"] == "none" and d["setting"]["bf16"] is False
    assert d["setting"]["data_parallel"] is None  # a bare python launch states no world size
    assert "tensor parallel 3 does not divide 16 attention heads (16 % 3 = 1)" in d["violations"]


def test_json_torchtitan_toml_and_cli(run):
    d = json.loads(run(str(FIX / "torchtitan" / "llama3_8b.toml"), "--json").stdout)
    assert d["framework"] == "torchtitan" and d["setting"]["data_parallel"] is None
    assert d["setting"]["recompute_granularity"] == "selective" and d["fixed"]["seq_length"] == 8192
    d = json.loads(run(str(FIX / "torchtitan" / "llama3_8b.toml"), "--json", "--world-size", "8").stdout)
    assert d["setting"]["data_parallel"] == 8 and d["fixed"]["global_batch_size"] == 8
    d = json.loads(run(str(FIX / "torchtitan" / "deepseek_v3_16b_v03.cmd"), "--json").stdout)
    assert d["setting"]["expert_parallel"] == 4 and d["setting"]["data_parallel"] == 16


def test_table_and_errors(run, tmp_path):
    r = run(str(FIX / "megatron" / "llama3_70b_cp.cmd"))
    assert r.exit_code == 0 and "context_parallel" in r.stdout and "no violations" in r.stdout
    r = run(str(tmp_path / "missing.sh"))
    assert r.exit_code == 1 and "does not exist" in r.output
    other = tmp_path / "other.sh"
    other.write_text("echo hi\n")
    r = run(str(other))
    assert r.exit_code == 1 and "no launch found" in r.output


def test_a_contract_leads_to_its_launch(run, tmp_path):
    contract = tmp_path / "contract.toml"
    contract.write_text(f"""name = "ds"
[workload]
adapter = "torchtitan"
launch = "{FIX / 'torchtitan' / 'deepseek_v3_16b.toml'}"
[hardware]
kind = "H100-80GB"
devices = 16
memory_capacity_gib = 80
""")
    d = json.loads(run(str(contract), "--json").stdout)
    assert d["framework"] == "torchtitan" and d["setting"]["data_parallel"] == 16
    assert d["fixed"]["global_batch_size"] == 64  # local batch 4 x DP 16


def test_the_tables_need_neither_torch_nor_megatron_core_and_the_check_says_it_runs(run):
    """The first command a user runs answers without importing torch or megatron-core (scripts/bench_knobs.py
    times it); with the framework check (the default) it says the check is running before it imports them."""
    import subprocess
    import sys

    probe = ("import sys\nfrom infrarsi.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    heavy = sorted(m for m in ('torch', 'megatron.core') if m in sys.modules)\n"
             "    print('IMPORTED', heavy, 'EXIT', e.code, file=sys.stderr)\n")
    launch = str(FIX / "megatron" / "llama2_70b_slurm.sh")
    quick = subprocess.run([sys.executable, "-c", probe, "knobs", launch, "--no-framework-check"], capture_output=True,
                           text=True, timeout=300)
    assert "IMPORTED [] EXIT 0" in quick.stderr, quick.stderr[-2000:]
    assert "no violations" in quick.stdout
    full = run(launch)  # in this process (megatron-core imports once per test session)
    assert "checking the setting with megatron-core's own config code" in full.stderr, full.stderr[-2000:]
    assert full.exit_code == 0 and "no violations" in full.stdout
