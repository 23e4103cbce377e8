"""Show what `infrarsi apply --dry-run` prints for a real Megatron-LM launch script.

The launch is tests/fixtures/megatron/llama2_70b_slurm.sh (an sbatch script: variables, one option string,
srun in a container). Its verification is recorded, not measured (a 64-GPU run does not fit this machine):
infrarsi.testing.recorded_run writes a lock and three interleaved pairs for the candidate TP 4 x PP 8 with
two virtual stages. What is real is the rest: the contract, the adapter's knob space and launch, the
framework check, the minimal edit of the user's script and its read-back, and the diff.

    python scripts/demo_apply_diff.py
"""

from __future__ import annotations

import io
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from infrarsi.stages import apply as stage
from infrarsi.testing.recorded_run import write_verified_run

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "tests/fixtures/megatron/llama2_70b_slurm.sh"
CONTRACT = '''name = "llama2-70b"
[workload]
adapter = "megatron"
launch = "llama2_70b_slurm.sh"
[hardware]
kind = "H100-80GB"
devices = 64
memory_capacity_gib = 80
[scope.knobs]
tensor_parallel = [4, 8]
pipeline_parallel = [4, 8]
virtual_pipeline = [1, 2]
'''


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "team-repo"
        repo.mkdir()
        git(repo, "init", "-q")
        run_dir = write_verified_run(repo / "train", CONTRACT, {"tensor_parallel": 4, "pipeline_parallel": 8,
                                                                "virtual_pipeline": 2},
                                     files={LAUNCH.name: LAUNCH.read_text()})
        out = io.StringIO()
        con = Console(file=out, width=120, highlight=False)
        rc = stage.run(run_dir, repo=repo, dry_run=True, console=con, err=con)
        text = out.getvalue()
        part = text.split(f"--- a/train/{LAUNCH.name}", 1)
        if rc or len(part) < 2:
            print(text)
            return 1
        print(f"$ infrarsi apply --run-dir {run_dir.relative_to(repo)} --repo . --dry-run   # (its diff of the launch)")
        print(f"--- a/train/{LAUNCH.name}" + part[1].split("\n--- ", 1)[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
