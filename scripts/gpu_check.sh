#!/usr/bin/env bash
# The prepared device check, in two parts, each writing its own table into $OUT:
# 1. kernels (scripts/gpu_check.py): verify every shipped kernel candidate on CUDA, benchmark each one that passes
#    against the reference, torch.compile of the reference and Liger-Kernel's kernel ($OUT/gpu_check.md, .json);
# 2. layouts (scripts/gpu_layouts.py): megatron-core's GPT trained at each single-GPU layout of
#    contracts/megatron-gpu-check-h100x1.toml, measured step time beside the step-time model's prediction
#    ($OUT/gpu_layouts.md, .json; about 3 minutes of the device).
#
#   scripts/gpu_check.sh --wheels     # here (with network to PyPI): the wheels and the layouts' plan into .whl/
#   scripts/gpu_check.sh --dry        # here, on the CPU: both parts on the interpreter / the CPU, small shapes
#   scripts/gpu_check.sh [ARGS...]    # on the GPU machine; ARGS go to gpu_check.py (--ops rmsnorm,swiglu --reps 20)
#   GPU_CHECK_PARTS=layouts scripts/gpu_check.sh   # one part only (kernels, layouts; default both)
#
# The GPU machine has its own python3 (3.12) with PyTorch and Triton and reaches no registry: what else runs
# travels in .whl/ (bring it along: it is git-ignored): liger-kernel (pure Python), megatron-core 0.16.1 (cp312,
# manylinux x86_64), packaging (megatron-core's METADATA requires torch, numpy and packaging; a CUDA torch installs
# neither of the last two: packaging is pure Python and travels, installed only where the device's python lacks
# it; numpy is compiled and the device image has it, so it is checked, not carried), and the layouts' plan (the
# commands and predictions, made with the project's own estimate code, which needs the project's dependencies).
# The project is put on PYTHONPATH from the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
LIGER_VERSION=0.8.5
MEGATRON_VERSION=0.16.1
OUT="${OUT:-$PWD/gpu_check_out}"
PY="${PYTHON:-python3}"
PARTS="${GPU_CHECK_PARTS:-kernels,layouts}"
MODE=gpu
case "${1:-}" in
  --wheels)
    mkdir -p .whl
    echo '*' > .whl/.gitignore  # git-ignored from inside (a worktree's .git is a file): it travels as carry
    here="${PYTHON:-.venv/bin/python}"
    "$here" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp -d .whl "liger-kernel==${LIGER_VERSION}"
    "$here" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
      "megatron-core==${MEGATRON_VERSION}" packaging
    "$here" scripts/gpu_layouts.py --write-plan .whl/gpu_layouts_plan.json
    ls -l .whl
    exit 0 ;;
  --dry)
    MODE=dry; shift
    [[ -x .venv/bin/python && -z "${PYTHON:-}" ]] && PY=.venv/bin/python ;;
esac
if [[ "$MODE" == gpu ]] && compgen -G ".whl/*.whl" > /dev/null; then
  wheels=()
  for w in .whl/*.whl; do
    case "$(basename "$w")" in  # packaging only where this python lacks it
      packaging-*) "$PY" -c 'import packaging' 2>/dev/null && continue ;;
    esac
    wheels+=("$w")
  done
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}"
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
[[ "$MODE" == gpu ]] && { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true; }
rc=0
if [[ ",$PARTS," == *,kernels,* ]]; then
  if [[ "$MODE" == dry ]]; then "$PY" scripts/gpu_check.py --dry --out "$OUT" "$@" || rc=$?
  else "$PY" scripts/gpu_check.py --out "$OUT" "$@" || rc=$?; fi
fi
if [[ ",$PARTS," == *,layouts,* ]]; then
  "$PY" -c 'import numpy' 2>/dev/null ||
    echo "gpu_check: $PY has no numpy, which megatron-core imports: the layouts part will fail"
  if [[ "$MODE" == dry ]]; then "$PY" scripts/gpu_layouts.py --dry --out "$OUT" || rc=$(( rc ? rc : $? ))
  else "$PY" scripts/gpu_layouts.py --plan .whl/gpu_layouts_plan.json --out "$OUT" || rc=$(( rc ? rc : $? )); fi
fi
exit "$rc"
