#!/usr/bin/env bash
# hvdlite on 2-8 real NVIDIA GPUs of one node, one rank per GPU, in one
# command with a deadline: correctness at N GPUs, the bus bandwidth of
# hvdlite and torch.distributed (NCCL) side by side, and ResNet-50 scaling
# against DDP. tests/gpu/device_check.sh checks one GPU in depth.
#
#   tests/gpu/multi_gpu_check.sh OUTDIR
#
# Exits at once (status 3, one line, OUTDIR/summary.json) on a machine that
# shows fewer than 2 GPUs, saying how many it needs. N = the GPUs this
# process sees (CUDA_VISIBLE_DEVICES, else nvidia-smi), at most 8.
#
# The cases, in order (each under its own timeout, all under the deadline):
#   ordering collectives scale join   workers/gpu_cases.py at N ranks
#   dtypes process_sets two_levels state fused_step
#                                     workers/multi_gpu_cases.py at N ranks
#                                     (two_levels: N even; hosts of 2 faked)
#   killed                            a rank killed mid-allreduce: the others
#                                     fail naming it, within seconds
#   busbw_hvdlite busbw_torch         workers/busbw.py, 8 B to 1 GiB
#   resnet50_{hvdlite,ddp}_{1,2,4,N}  examples/pytorch/synthetic_benchmark.py
#                                     --model resnet50 (built in), images/s
# then the targets (multi_gpu_targets.py): bus bandwidth at 1 GiB >= 0.95 of
# torch.distributed's; the fused 200 x 16 KiB step no slower than DDP's
# bucket; ResNet-50 scaling efficiency at N >= DDP's.
#
# Needs Python (PYTHON, default python3) with a CUDA build of PyTorch, and
# hvdlite: built from this checkout into a work folder like device_check.sh
# does (CMake, ninja, pybind11, scikit-build-core; no network), or the build
# in MULTI_GPU_CHECK_SITE (e.g. device_check.sh's DEVICE_CHECK_WORKDIR/site).
# Writes OUTDIR/log.txt (everything) and OUTDIR/summary.json (per case:
# status, seconds, numbers; environment.targets), rewritten after each case.
#
# Exit status: 0 every case passed; 1 something failed; 2 bad usage or no
# usable Python/PyTorch; 3 fewer than 2 GPUs.
#
# Settings (environment):
#   MULTI_GPU_CHECK_DEADLINE=1500   seconds for the whole check
#   MULTI_GPU_CHECK_CASES="dtypes busbw_hvdlite"   run only these cases
#   MULTI_GPU_CHECK_MAX_BYTES=1073741824           the largest busbw size
#   MULTI_GPU_CHECK_FAKE=1   no GPU: the subset that runs on the fake CUDA
#       and NCCL of tests/common/fake_gpu (4 fake GPUs; raw core requests, no
#       framework), against the installed hvdlite: each rank's GPU in every
#       layout, a shared GPU named, the cost of a call, every collective
#       against the CPU path, ordering by events
#       with fused batches, scaled averages and a sub-set, two levels.
# HVDLITE_NCCL_TIMEOUT_SECONDS is 20 here, so a hang costs seconds.
set -u -o pipefail

usage() {
    echo "usage: $0 OUTDIR   (hvdlite on 2-8 GPUs of one node; see the top of this file)" >&2
    [[ -n ${1:-} ]] && echo "$0: $1" >&2
    exit 2
}
[[ $# -eq 1 && -n $1 ]] || usage

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/gpu/check_lib.sh
source "$HERE/check_lib.sh"  # SUMMARIZE, PY, open_output, log, now, since, finish_check
REPO=$(cd "$HERE/../.." && pwd)
DEADLINE=${MULTI_GPU_CHECK_DEADLINE:-1500}
FAKE=${MULTI_GPU_CHECK_FAKE:-0}
open_output "$1"
export PYTHONUNBUFFERED=1
START=$SECONDS

# --- 1. how many GPUs? (quick, builds nothing) -------------------------------
visible_gpus() {
    if [[ -n ${CUDA_VISIBLE_DEVICES+set} ]]; then
        case $CUDA_VISIBLE_DEVICES in
            "" | -1 | -1,*) echo 0 ;;
            *) awk -F, '{ print NF }' <<< "$CUDA_VISIBLE_DEVICES" ;;
        esac
    elif command -v nvidia-smi > /dev/null 2>&1; then
        timeout 30 nvidia-smi -L 2> /dev/null | grep -c '^GPU '
    else
        compgen -G '/dev/nvidia[0-9]*' | wc -l
    fi
}
if [[ $FAKE == 1 ]]; then
    GPUS=4
else
    GPUS=$(visible_gpus)
fi
if ((GPUS < 2)); then
    message="multi_gpu_check needs 2 to 8 GPUs on one node; this machine shows $GPUS. For one GPU run tests/gpu/device_check.sh; without a GPU, MULTI_GPU_CHECK_FAKE=1 runs the fake-GPU subset"
    log "$message"
    printf '{\n  "result": "too_few_gpus",\n  "gpus": %d,\n  "needs": "2-8",\n  "message": "%s",\n  "environment": {},\n  "cases": {}\n}\n' \
        "$GPUS" "$message" > "$SUMMARY"
    exit 3
fi
N=$((GPUS < 8 ? GPUS : 8))
command -v "$PY" > /dev/null 2>&1 || usage "no Python: '$PY' is not found (set PYTHON)"
"$PY" "$SUMMARIZE" start "$SUMMARY" "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "commit=$(git -C "$REPO" rev-parse --short HEAD 2> /dev/null || echo unknown)" "gpus=$N" "fake=$FAKE" \
    || usage "$SUMMARIZE failed"
log "multi_gpu_check: $N GPU(s)$([[ $FAKE == 1 ]] && echo ' (fake)')"

# A user's tuning must not change what is checked; a hang must cost seconds.
for variable in $(compgen -e | grep -E '^(HVDLITE|HOROVOD)_' || true); do
    log "multi_gpu_check: ignoring $variable (set in the environment)"
    unset "$variable"
done
export HVDLITE_NCCL_TIMEOUT_SECONDS=20

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hvdlite-multi-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
on_signal() {
    log "multi_gpu_check: interrupted"
    "$PY" "$SUMMARIZE" finish "$SUMMARY" interrupted "stopped by a signal" 2> /dev/null
    exit 130
}
trap on_signal INT TERM

# --- 2. hvdlite to check ------------------------------------------------------
if [[ $FAKE == 1 ]]; then  # the installed hvdlite, over the fake CUDA runtime and NCCL
    FAKE_GPU_DIR=$REPO/tests/common/fake_gpu "$PY" -c '
import os, sys
sys.path.insert(0, os.environ["FAKE_GPU_DIR"])
import fake_gpu_build as f
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
env = f.environment(out)
print(env["HVDLITE_NCCL_LIBRARY"])
print(env["HVDLITE_CUDART_LIBRARY"])' "$WORK/fake" > "$WORK/fake.out" 2>&1 || {
        cat "$WORK/fake.out" >> "$LOG"; usage "building the fake GPU failed (see $LOG)"; }
    export HVDLITE_NCCL_LIBRARY=$(sed -n 1p "$WORK/fake.out") HVDLITE_CUDART_LIBRARY=$(sed -n 2p "$WORK/fake.out")
    "$PY" "$SUMMARIZE" env "$SUMMARY" fake_gpu "4 fake GPUs: $HVDLITE_CUDART_LIBRARY, $HVDLITE_NCCL_LIBRARY"
elif [[ -n ${MULTI_GPU_CHECK_SITE:-} ]]; then
    export PYTHONPATH="$MULTI_GPU_CHECK_SITE${PYTHONPATH:+:$PYTHONPATH}"
else
    log "=== build: pip install --no-build-isolation --no-deps --no-index --target $WORK/site"
    build_started=$(now)
    timeout 600 "$PY" -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir \
        --disable-pip-version-check --target "$WORK/site" -C "build-dir=$WORK/build" "$REPO" \
        > "$WORK/build.out" 2>&1
    build_rc=$?
    cat "$WORK/build.out" >> "$LOG"
    if [[ $build_rc -ne 0 ]]; then
        "$PY" "$SUMMARIZE" case "$SUMMARY" build fail "$(since "$build_started")" "$WORK/build.out" "pip exited $build_rc"
        "$PY" "$SUMMARIZE" finish "$SUMMARY" fail "the build failed"
        log "multi_gpu_check: the build failed (see $LOG)"
        exit 1
    fi
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
    log "build: $(since "$build_started")s"
fi
if [[ $FAKE != 1 ]]; then
    probe=$(timeout 120 "$PY" -c 'import torch, hvdlite.torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())' 2>> "$LOG")
    [[ -n $probe && ${probe##* } -ge 2 ]] || usage "PyTorch with CUDA and hvdlite must import in $PY and see $N GPUs (got: '${probe}'; see $LOG)"
    "$PY" "$SUMMARIZE" env "$SUMMARY" torch "$probe"
    command -v nvidia-smi > /dev/null 2>&1 && "$PY" "$SUMMARIZE" env "$SUMMARY" nvidia_smi \
        "$(timeout 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1)"
fi
mkdir -p "$WORK/run"  # the ranks' working folder: not the checkout, whose hvdlite/ has no core

# --- 3. the cases --------------------------------------------------------------
failures=0
selected() { [[ -z ${MULTI_GPU_CHECK_CASES:-} || " $MULTI_GPU_CHECK_CASES " == *" $1 "* ]]; }

# run_case NAME RANKS TIMEOUT EXPECT COMMAND...: EXPECT is "ok" (every rank
# prints "<NAME's mode> OK" and the command exits 0), "killed" (the command
# fails, within its timeout, and the survivors say OK), or "exit0".
run_case() {
    local name=$1 ranks=$2 budget=$3 expect=$4 mode=$5
    shift 5
    selected "$name" || return 0
    local out=$WORK/$name.out remaining=$((DEADLINE - (SECONDS - START))) status note=""
    if ((remaining < 20)); then
        echo "not run: the check reached MULTI_GPU_CHECK_DEADLINE=${DEADLINE}s" > "$out"
        "$PY" "$SUMMARIZE" case "$SUMMARY" "$name" skip 0 "$out" "out of time"
        log "--- $name: skip (out of time)"
        failures=$((failures + 1))
        return 0
    fi
    local limit=$((budget < remaining ? budget : remaining))
    log "=== $name: $ranks rank(s), timeout ${limit}s"
    local started rc oks seconds
    started=$(now)
    (cd "$WORK/run" && timeout -k 10 "$limit" "$@") > "$out" 2>&1
    rc=$?
    seconds=$(since "$started")
    cat "$out" >> "$LOG"
    oks=$(grep -c -E "(^|:)$mode OK" "$out")
    # The benchmark's JSON line becomes the case's numbers.
    grep -o '{"backend".*}' "$out" | sed 's/^/DEVICE_CHECK_RESULT /' >> "$out"
    if [[ $rc -eq 124 || $rc -eq 137 ]] && [[ $expect != killed ]]; then
        status=timeout note="no result within ${limit}s"
    elif [[ $expect == killed ]]; then
        if [[ $rc -ne 0 && $oks -ge 1 ]] && awk -v s="$seconds" -v l="$limit" 'BEGIN { exit !(s < l) }'; then
            status=pass
        else
            status=fail note="exit $rc after ${seconds}s, $oks survivor(s) said OK (want: a failing exit, the survivors naming the lost rank, in time)"
        fi
    elif [[ $rc -eq 0 && ($expect == exit0 || $oks -eq $ranks) ]]; then
        status=pass
    else
        status=fail note="exit $rc; '$mode OK' from $oks of $ranks rank(s)"
    fi
    "$PY" "$SUMMARIZE" case "$SUMMARY" "$name" "$status" "$seconds" "$out" "$note"
    if [[ $status != pass ]]; then
        failures=$((failures + 1))
        tail -n 20 "$out"
    fi
    log "--- $name: $status in ${seconds}s${note:+ ($note)}"
}

LAUNCH=("$PY" -m hvdlite.runner)
TORCHRUN=("$PY" -m torch.distributed.run --standalone)
if [[ $FAKE == 1 ]]; then
    FAKE_WORKERS=$REPO/tests/common/workers
    for mode in one_each all shared mig; do
        ranks=$([[ $mode == all ]] && echo 3 || echo 2)
        run_case "device_$mode" "$ranks" 90 ok "$mode" "${LAUNCH[@]}" -np "$ranks" "$PY" "$FAKE_WORKERS/gpu_device_choice.py" "$mode"
    done
    run_case call_cost 2 90 ok cost "${LAUNCH[@]}" -np 2 "$PY" "$FAKE_WORKERS/gpu_call_cost.py"
    export FAKE_CUDA_RACE_CHECK=1  # any unordered access fails the rank
    run_case collectives 3 120 ok "cuda path" "${LAUNCH[@]}" -np 3 "$PY" "$FAKE_WORKERS/cuda_fake_gpu.py"
    run_case ordering 3 120 ok ordering "${LAUNCH[@]}" -np 3 "$PY" "$FAKE_WORKERS/cuda_fake_behaviour.py" ordering
    run_case scale 3 120 ok scale "${LAUNCH[@]}" -np 3 "$PY" "$FAKE_WORKERS/cuda_fake_behaviour.py" scale
    run_case two_levels 4 120 ok hierarchical "${LAUNCH[@]}" -np 4 "$PY" "$FAKE_WORKERS/cuda_fake_behaviour.py" hierarchical
else
    CASES_WORKER=$HERE/workers/gpu_cases.py
    MULTI_WORKER=$HERE/workers/multi_gpu_cases.py
    for mode in ordering collectives scale join; do
        run_case "$mode" "$N" 180 ok "$mode" "${LAUNCH[@]}" -np "$N" "$PY" "$CASES_WORKER" "$mode"
    done
    for mode in dtypes process_sets two_levels state fused_step; do
        if [[ $mode == two_levels ]] && ((N % 2)); then
            continue  # hosts of 2 ranks each
        fi
        run_case "$mode" "$N" 180 ok "$mode" "${LAUNCH[@]}" -np "$N" "$PY" "$MULTI_WORKER" "$mode"
    done
    run_case killed "$N" 90 killed killed "${LAUNCH[@]}" -np "$N" "$PY" "$CASES_WORKER" killed
    MAX_BYTES=${MULTI_GPU_CHECK_MAX_BYTES:-1073741824}
    run_case busbw_hvdlite "$N" 300 exit0 busbw "${LAUNCH[@]}" -np "$N" "$PY" "$HERE/workers/busbw.py" hvdlite --max-bytes "$MAX_BYTES"
    run_case busbw_torch "$N" 300 exit0 busbw env PYTHONPATH="$HERE/workers:${PYTHONPATH:-}" "${TORCHRUN[@]}" \
        --nproc-per-node "$N" "$HERE/workers/busbw.py" torch --max-bytes "$MAX_BYTES"
    BENCH=("$REPO/examples/pytorch/synthetic_benchmark.py" --model resnet50 --image-size 224 --batch-size 64
           --num-warmup-batches 5 --num-batches-per-iter 10 --num-iters 3 --threads 4 --json)
    for ranks in $(printf '%s\n' 1 2 4 "$N" | awk -v n="$N" '$1 <= n' | sort -un); do
        run_case "resnet50_hvdlite_$ranks" "$ranks" 240 exit0 - "${LAUNCH[@]}" -np "$ranks" "$PY" "${BENCH[@]}"
        run_case "resnet50_ddp_$ranks" "$ranks" 240 exit0 - "${TORCHRUN[@]}" --nproc-per-node "$ranks" "${BENCH[@]}" --ddp
    done
fi

# --- 4. targets and verdict ---------------------------------------------------
if [[ $FAKE != 1 ]]; then
    "$PY" "$HERE/multi_gpu_targets.py" "$SUMMARY" > "$WORK/targets.json" 2> >(tee -a "$LOG" >&2)
    "$PY" "$SUMMARIZE" env "$SUMMARY" targets "@$WORK/targets.json"
fi
finish_check "$failures"
