#!/usr/bin/env bash
# The prepared device check: verify every shipped kernel candidate on CUDA, benchmark each one that passes
# against the reference, torch.compile of the reference and Liger-Kernel's kernel, and write one table
# ($OUT/gpu_check.md and .json). See scripts/gpu_check.py for the targets it judges.
#
#   scripts/gpu_check.sh --wheels     # here (with network to PyPI): liger-kernel into .whl/ for the device
#   scripts/gpu_check.sh --dry        # here, on the CPU: the same steps on the interpreter, small shapes
#   scripts/gpu_check.sh [ARGS...]    # on the GPU machine; ARGS go to gpu_check.py (--ops rmsnorm,swiglu --reps 20)
#
# The GPU machine has its own python3 with PyTorch and Triton and reaches no registry: only liger-kernel
# travels, as a wheel (pure Python). The project itself needs nothing beyond torch and the standard library
# for this check; it is put on PYTHONPATH from the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
LIGER_VERSION=0.8.5
OUT="${OUT:-$PWD/gpu_check_out}"
PY="${PYTHON:-python3}"
MODE=gpu
case "${1:-}" in
  --wheels)
    mkdir -p .whl
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    "${PYTHON:-.venv/bin/python}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp -d .whl "liger-kernel==${LIGER_VERSION}"
    ls -l .whl
    exit 0 ;;
  --dry)
    MODE=dry; shift
    [[ -x .venv/bin/python && -z "${PYTHON:-}" ]] && PY=.venv/bin/python ;;
esac
if [[ "$MODE" == gpu ]] && compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
if [[ "$MODE" == dry ]]; then
  exec "$PY" scripts/gpu_check.py --dry --out "$OUT" "$@"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec "$PY" scripts/gpu_check.py --out "$OUT" "$@"
