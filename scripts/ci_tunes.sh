#!/usr/bin/env bash
# The real end-to-end tunes, one after the other, with their contracts' own budgets (CI runs this after `make test`):
#   make demo                                        contracts/minigpt-cpu.toml  (the embedded CPU transformer)
#   infrarsi tune contracts/torchtitan-cpu.toml      torchtitan 0.2.2, 2 gloo ranks
#   infrarsi tune contracts/megatron-cpu.toml        megatron-core 0.16.1, 2 gloo ranks
# Each prints its exit code, wall time and verdict. A tune passes when it promotes a candidate (exit 0), when the
# doctor stops it early on the machine's noise (exit 3, its run unfinished, with the doctor's "stopped:" line as
# the reason), or when it walks every stage and finishes without a promotion (exit 3, its answer: on a loaded
# machine the verification may not clear the detectable effect, and saying so is a true answer); anything else
# fails (an error, a usage error, exit 3 with neither, a time-out).
# Each run starts from nothing: its own run directory and an empty experience bank, under one temporary folder.
#
#   scripts/ci_tunes.sh [NAME ...]     NAME: demo, torchtitan-cpu, megatron-cpu (default: all three)
# Each has a time limit, past which it fails: its budget's own figure with room (the demo "under 10 minutes": 15
# min; torchtitan-cpu 30: on the quiet machine (load 1.6, 2026-12-07) its search and first promotion took 10 min and a
# second candidate near the detectable effect ran its pairs past 20; megatron-cpu, up to 20 minutes of verification
# after its search: 30). On an idle machine they take ~6, ~10-22 and ~10 minutes, about 40 with `make test`'s ~18.
# Environment: CI_TUNE_LIMIT_S (one limit for every tune, in seconds, instead of those), CI_TUNES_DIR (where the run
# directories and logs go; default a fresh temporary folder, kept for inspection).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=${CI_TUNES_DIR:-$(mktemp -d -t infrarsi-ci-tunes.XXXXXX)}
mkdir -p "$OUT"
[ -x "$PY" ] || { echo "ci_tunes: $PY is missing; run \`make install\` (or \`make test\`) first"; exit 1; }
[ $# -gt 0 ] || set -- demo torchtitan-cpu megatron-cpu

command_of() {  # cmd=(the command a user types for NAME), with its run directory in $OUT; LIMIT: its time limit (s)
    case "$1" in
        demo) cmd=(make demo "RUN=$OUT/demo/run"); LIMIT=900 ;;
        torchtitan-cpu) cmd=(.venv/bin/infrarsi tune "contracts/$1.toml" --run-dir "$OUT/$1/run"); LIMIT=1800 ;;
        megatron-cpu) cmd=(.venv/bin/infrarsi tune "contracts/$1.toml" --run-dir "$OUT/$1/run"); LIMIT=1800 ;;
        *) return 1 ;;
    esac
    LIMIT=${CI_TUNE_LIMIT_S:-$LIMIT}
}

# verdict NAME CODE LOG RUN_DIR -> prints "pass: ..." or "FAIL: ..."
verdict() {
    local name=$1 code=$2 log=$3 run=$4 outcome reason
    outcome=$("$PY" -c 'import sys; from pathlib import Path
from infrarsi.stages.outcome import run_outcome
o = run_outcome(Path(sys.argv[1]), 0) if (Path(sys.argv[1]) / "contract.lock").exists() else {"outcome": "none"}
b = o.get("best") or {}
print(o["outcome"], b.get("speedup") or "", b.get("changes") or "")' "$run" 2>/dev/null || echo "unreadable")
    reason=$(grep -a '^stopped:' "$log" | tail -n 1)
    case "$code:${outcome%% *}" in
        0:promoted) echo "pass: promoted ${outcome#promoted }" ;;
        3:unfinished|0:unfinished)  # 0: a make target that passes the doctor's stop on as its own success
            if [ -n "$reason" ]; then echo "pass: stopped early on the machine's noise: ${reason#stopped: }"
            else echo "FAIL: exit 3 before the search without the doctor's reason (no 'stopped:' line in $log)"; fi ;;
        3:no_promotion)  # every stage ran and the run's answer is "nothing verified faster": a true answer, not a fault
            echo "pass: finished without a promotion (every stage ran; nothing cleared the verification: $run/report.md)" ;;
        124:*|137:*) echo "FAIL: still running after its limit of ${LIMIT} s, stopped" ;;
        *) echo "FAIL: exit $code, run $outcome: $(grep -a -E '^(error|tune: stopped)' "$log" | tail -n 1)" ;;
    esac
}

failed=0
summary=()
for name in "$@"; do
    command_of "$name" || { echo "ci_tunes: unknown tune '$name' (demo, torchtitan-cpu, megatron-cpu)"; exit 2; }
    mkdir -p "$OUT/$name"
    log=$OUT/$name/log
    echo "=== $name: ${cmd[*]} (limit ${LIMIT} s; log $log)"
    start=$(date +%s)
    # the log is the tune's own output, shown as it comes
    INFRARSI_BANK=$OUT/$name/bank.sqlite timeout --kill-after=30 "$LIMIT" "${cmd[@]}" 2>&1 | tee "$log"
    code=${PIPESTATUS[0]}
    wall=$(( $(date +%s) - start ))
    # make passes a recipe's failure on as its own exit 2 ("Error N"): the tune's code is N
    if [ "$name" = demo ] && [ "$code" = 2 ]; then
        n=$(grep -a -o -E '\] Error [0-9]+$' "$log" | tail -n 1 | grep -o -E '[0-9]+$')
        code=${n:-2}
    fi
    v=$(verdict "$name" "$code" "$log" "$OUT/$name/run")
    case "$v" in FAIL*) failed=1 ;; esac
    line=$(printf '%-15s exit %-3s %4d s (%dm%02ds)  %s' "$name" "$code" "$wall" $((wall / 60)) $((wall % 60)) "$v")
    echo "=== $line"
    summary+=("$line")
done

echo "=== ci_tunes: $(printf '%s; ' "$@")load $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; run directories in $OUT"
printf '  %s\n' "${summary[@]}"
exit $failed
