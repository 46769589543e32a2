# What device_check.sh and multi_gpu_check.sh share, sourced by both once
# they have set HERE (this folder). finish_check also needs START.
# shellcheck shell=bash

SUMMARIZE=$HERE/device_check_summary.py
PY=${PYTHON:-python3}

# The output folder $1, made if need be (usage() when it cannot be): OUT,
# LOG (emptied) and SUMMARY (removed: the run writes it anew).
open_output() {  # OUTDIR
    mkdir -p "$1" || usage
    OUT=$(cd "$1" && pwd)
    LOG=$OUT/log.txt
    SUMMARY=$OUT/summary.json
    : > "$LOG"
    rm -f "$SUMMARY"
}

log() { printf '%s\n' "$*" | tee -a "$LOG"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# The verdict: pass when no case failed, written into the summary, whose
# table is printed and logged; exits 0 on pass, else 1.
finish_check() {  # FAILURES
    local failures=$1
    log "=== summary ($((SECONDS - START))s in all; $SUMMARY)"
    if ((failures == 0)); then
        "$PY" "$SUMMARIZE" finish "$SUMMARY" pass
    else
        "$PY" "$SUMMARIZE" finish "$SUMMARY" fail "$failures case(s) did not pass"
    fi
    "$PY" "$SUMMARIZE" table "$SUMMARY" | tee -a "$LOG"
    ((failures == 0)) || exit 1
    exit 0
}
