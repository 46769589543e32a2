#!/usr/bin/env bash
# hvdlite on ONE real NVIDIA GPU: builds this checkout, smoke-tests the build,
# then runs the cases of tests/gpu/workers/ (device_cases.py: torch;
# jax_cases.py; keras_cases.py) and bench/gpu_allreduce.py one after
# another, each under its own timeout.
#
#   tests/gpu/device_check.sh [--wheels DIR] OUTDIR
#
# Needs Python (PYTHON, default python3) with a CUDA build of PyTorch and the
# NCCL and CUDA runtime it brings, and CMake, ninja, pybind11 and
# scikit-build-core; no network (pip --no-index --no-build-isolation). The
# JAX cases need JAX with its CUDA plugin and optax; the Keras cases Keras 3,
# which --wheels DIR installs (pip --no-index --no-deps, every *.whl in DIR,
# into a folder put on PYTHONPATH): keras, optree and namex; Keras' other
# needs (absl-py, numpy, rich, ml-dtypes, packaging; h5py only to save) come
# with JAX, optax and flax. Without --wheels, where Keras does not import,
# the Keras cases are reported skipped, not failed.
# Writes OUTDIR/log.txt (everything), OUTDIR/summary.json (per case: status,
# seconds, key numbers, the last lines of output when it did not pass; the
# environment: GPU, driver, torch, CUDA, NCCL, gpu_libraries(), compiler),
# rewritten after every step, and OUTDIR/bench.json. The build goes to a
# temporary folder, so OUTDIR holds only those few files.
#
# Exit status: 0 every case passed (the Keras ones may be skipped, without
# --wheels); 1 something failed; 2 bad usage or no usable Python/PyTorch;
# 3 no NVIDIA GPU (one line says why; nothing built).
#
# Settings (environment):
#   DEVICE_CHECK_CC, DEVICE_CHECK_CXX  compilers for the build. By default CC
#       and CXX are unset, so CMake picks the system's cc/c++: an image may
#       set CXX to a wrapper whose build of hvdlite crashes at the first
#       std::ostream use (the smoke test then names the compiler).
#   DEVICE_CHECK_CASES="collectives killed"   run only these cases.
#   DEVICE_CHECK_DEADLINE=420   seconds for the whole check; a case that
#       would start later is skipped, one that would run past it is cut.
#   DEVICE_CHECK_WORKDIR=DIR    build there and keep it (a rerun rebuilds
#       only what changed); by default a temporary folder, removed at the end.
#   DEVICE_CHECK_OVERLAP_BOUND=1.15   the overlap case's bound (see below).
set -u -o pipefail

usage() {
    echo "usage: $0 [--wheels DIR] OUTDIR   (builds hvdlite and runs the real-GPU checks; see the top of this file)" >&2
    [[ -n ${1:-} ]] && echo "$0: $1" >&2
    exit 2
}
WHEELS=""
if [[ ${1:-} == --wheels ]]; then
    [[ $# -ge 2 && -n $2 ]] || usage "--wheels needs a folder"
    [[ -d $2 ]] || usage "--wheels $2: no such folder"
    compgen -G "$2/*.whl" > /dev/null || usage "--wheels $2: no *.whl in it"
    WHEELS=$(cd "$2" && pwd)
    shift 2
fi
[[ $# -eq 1 && -n $1 ]] || usage

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/gpu/check_lib.sh
source "$HERE/check_lib.sh"  # SUMMARIZE, PY, open_output, log, now, since, finish_check
REPO=$(cd "$HERE/../.." && pwd)
WORKERS=$HERE/workers
BENCH=$REPO/bench/gpu_allreduce.py
DEADLINE=${DEVICE_CHECK_DEADLINE:-420}
open_output "$1"
rm -f "$OUT/bench.json"
export PYTHONUNBUFFERED=1

# The cases, in order: name, ranks, timeout in seconds, worker (in
# workers/). Each usually takes a quarter of its timeout or less on an H200:
# the torch cases 5-15 s, the JAX and Keras ones 20-50 s (imports, XLA
# compiles), the bench 30-40 s; about 5 minutes in all with the build.
CASES=(
    "report 1 45 device_cases"
    "collectives 1 60 device_cases"
    "host_path 2 60 device_cases"
    "two_hosts 2 60 device_cases"
    "two_level_host 4 90 device_cases"
    "second_stream 2 60 device_cases"
    "overlap 1 60 device_cases"
    "fusion_growth 1 60 device_cases"
    "cuda_graph 1 60 device_cases"
    "powersgd_cuda 2 60 device_cases"
    "jax_step 1 150 jax_cases"
    "jax_host_path 2 90 jax_cases"
    "keras_jax 1 150 keras_cases"
    "keras_torch 1 90 keras_cases"
    "killed 2 60 device_cases"
    "bench 1 90 -"
)

json_string() {
    local s=${1//\\/\\\\}
    s=${s//\"/\\\"}
    printf '"%s"' "$s"
}

# Without a GPU: say so in one line and in summary.json (no Python needed),
# and stop before building anything.
no_gpu() {
    log "device_check: no NVIDIA GPU found: $1"
    printf '{\n  "result": "no_gpu",\n  "message": %s,\n  "environment": {},\n  "cases": {}\n}\n' \
        "$(json_string "$1")" > "$SUMMARY"
    exit 3
}

setup_error() {
    log "device_check: cannot run: $1"
    printf '{\n  "result": "error",\n  "message": %s,\n  "environment": {},\n  "cases": {}\n}\n' \
        "$(json_string "$1")" > "$SUMMARY"
    exit 2
}

# --- 1. is there a GPU? (quick, builds nothing) ----------------------------
if [[ -n ${CUDA_VISIBLE_DEVICES+set} ]]; then
    case $CUDA_VISIBLE_DEVICES in
        "" | -1 | -1,*)
            no_gpu "CUDA_VISIBLE_DEVICES is set to '$CUDA_VISIBLE_DEVICES', which hides every GPU" ;;
    esac
fi
if [[ ! -e /dev/nvidia0 ]] && ! command -v nvidia-smi > /dev/null 2>&1; then
    no_gpu "no /dev/nvidia0 and no nvidia-smi on this machine"
fi
command -v "$PY" > /dev/null 2>&1 || setup_error "no Python: '$PY' is not found (set PYTHON)"

PROBE='
import json, sys
try:
    import torch
except Exception as error:
    print("notorch", json.dumps(f"{type(error).__name__}: {error}"))
    sys.exit(0)
info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
if not torch.cuda.is_available():
    print("nocuda", json.dumps(info))
    sys.exit(0)
p = torch.cuda.get_device_properties(0)
info.update(gpu=p.name, gpu_count=torch.cuda.device_count(), capability=f"{p.major}.{p.minor}",
            gpu_memory_gib=round(p.total_memory / 2**30, 1))
print("cuda", json.dumps(info))
'
probe=$(timeout 120 "$PY" -c "$PROBE" 2>> "$LOG" | tail -n 1)
verdict=${probe%% *}
details=${probe#* }
case $verdict in
    cuda) ;;
    nocuda)
        no_gpu "torch.cuda.is_available() is False ($details): a CPU build of PyTorch, or no usable driver/device (see nvidia-smi)" ;;
    notorch)
        setup_error "PyTorch does not import in $PY: $details" ;;
    *)
        setup_error "probing PyTorch with $PY failed: '${probe}' (see $LOG)" ;;
esac

# --- 2. the machine, then the build ------------------------------------------
START=$SECONDS
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2> /dev/null || echo unknown)
DIRTY=$(git -C "$REPO" status --porcelain 2> /dev/null | wc -l | tr -d ' ')
"$PY" "$SUMMARIZE" start "$SUMMARY" "started=$STARTED" "commit=$COMMIT" "uncommitted_files=$DIRTY" \
    "python=$(command -v "$PY")" || setup_error "$SUMMARIZE failed"
"$PY" "$SUMMARIZE" env "$SUMMARY" torch_probe "$details"
log "device_check: hvdlite $COMMIT ($DIRTY uncommitted files) on $details"
if command -v nvidia-smi > /dev/null 2>&1; then
    timeout 30 nvidia-smi >> "$LOG" 2>&1
    smi=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)
    log "nvidia-smi: $smi"
    "$PY" "$SUMMARIZE" env "$SUMMARY" nvidia_smi "$smi"
fi

if [[ -n ${DEVICE_CHECK_WORKDIR:-} ]]; then
    WORK=$DEVICE_CHECK_WORKDIR
    mkdir -p "$WORK"
    WORK=$(cd "$WORK" && pwd)
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/hvdlite-device-check.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
fi
SITE=$WORK/site
BUILD=$WORK/build
RUN_DIR=$WORK/run  # the ranks' working folder: not the checkout, whose hvdlite/ has no core
rm -rf "$SITE" "$RUN_DIR"
mkdir -p "$RUN_DIR"

on_signal() {
    log "device_check: interrupted"
    "$PY" "$SUMMARIZE" finish "$SUMMARY" interrupted "stopped by a signal" 2> /dev/null
    exit 130
}
trap on_signal INT TERM

# A user's tuning must not change what is checked.
for variable in $(compgen -e | grep -E '^(HVDLITE|HOROVOD)_' || true); do
    log "device_check: ignoring $variable (set in the environment)"
    unset "$variable"
done

build_env=(env -u CC -u CXX)
[[ -n ${DEVICE_CHECK_CC:-} ]] && build_env+=("CC=$DEVICE_CHECK_CC")
[[ -n ${DEVICE_CHECK_CXX:-} ]] && build_env+=("CXX=$DEVICE_CHECK_CXX")
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
log "=== build: pip install --no-build-isolation --no-deps --no-index --target $SITE (CC/CXX: ${DEVICE_CHECK_CC:-unset}/${DEVICE_CHECK_CXX:-unset})"
build_started=$(now)
timeout 600 "${build_env[@]}" "$PY" -m pip install --no-build-isolation --no-deps --no-index \
    --no-cache-dir --disable-pip-version-check --target "$SITE" -C "build-dir=$BUILD" "$REPO" \
    > "$WORK/build.out" 2>&1
build_rc=$?
build_seconds=$(since "$build_started")
cat "$WORK/build.out" >> "$LOG"
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2> /dev/null | head -n 1)
cxx_version=$([[ -n $cxx ]] && "$cxx" --version 2>&1 | head -n 1)
COMPILER="${cxx:-unknown} (${cxx_version:-version unknown})"
"$PY" "$SUMMARIZE" env "$SUMMARY" compiler "$COMPILER"
"$PY" "$SUMMARIZE" env "$SUMMARY" build_seconds "$build_seconds"
if [[ $build_rc -ne 0 ]]; then
    tail -n 30 "$WORK/build.out"
    "$PY" "$SUMMARIZE" case "$SUMMARY" build fail "$build_seconds" "$WORK/build.out" "pip exited $build_rc"
    log "device_check: the build failed (exit $build_rc) after ${build_seconds}s with $COMPILER; see $LOG"
    "$PY" "$SUMMARIZE" finish "$SUMMARY" fail "the build failed"
    exit 1
fi
log "build: ${build_seconds}s with $COMPILER"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export DEVICE_CHECK_SITE=$SITE  # each rank checks that it imports hvdlite from here
# hvdlite.jax compiles its XLA FFI handler at first use: into the work
# folder (private, as hvdlite requires), not the user's ~/.cache.
mkdir -p -m 700 "$WORK/cache"
export HVDLITE_CACHE_DIR=$WORK/cache

# --- 3. a 1-rank smoke test: does the core run at all? ----------------------
SMOKE='
import os, numpy as np, hvdlite, hvdlite.numpy as hvd
site = os.environ["DEVICE_CHECK_SITE"]
if not os.path.realpath(hvdlite.__file__).startswith(os.path.realpath(site)):
    raise SystemExit(f"hvdlite imports from {hvdlite.__file__}, not from the build under test in "
                     f"{site}: another install in this Python (an editable one, pip install -e) "
                     "comes before PYTHONPATH; use a Python without it (make test-gpu makes one)")
hvd.init()
x = np.arange(6, dtype=np.float64)
y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0, name="smoke")
assert np.allclose(y, 3 * x), y
hvd.shutdown()
print("smoke OK")
'
smoke_started=$(now)
(cd "$RUN_DIR" && PYTHONFAULTHANDLER=1 timeout -k 5 60 "$PY" -c "$SMOKE") > "$WORK/smoke.out" 2>&1
smoke_rc=$?
cat "$WORK/smoke.out" >> "$LOG"
if [[ $smoke_rc -ne 0 ]]; then
    if [[ $smoke_rc -gt 128 && $smoke_rc -ne 137 ]] || grep -q "Fatal Python error" "$WORK/smoke.out"; then
        why="the compiled core crashed (exit $smoke_rc) in a 1-rank NumPy allreduce; it was built by $COMPILER. Build with another compiler: DEVICE_CHECK_CXX=/usr/bin/g++ DEVICE_CHECK_CC=/usr/bin/gcc $0 $OUT"
    else
        why="a 1-rank NumPy allreduce failed (exit $smoke_rc); built by $COMPILER"
    fi
    tail -n 30 "$WORK/smoke.out"
    log "device_check: $why"
    "$PY" "$SUMMARIZE" case "$SUMMARY" smoke fail "$(since "$smoke_started")" "$WORK/smoke.out" "$why"
    "$PY" "$SUMMARIZE" finish "$SUMMARY" fail "the smoke test failed: nothing else was run"
    exit 1
fi
"$PY" "$SUMMARIZE" case "$SUMMARY" smoke pass "$(since "$smoke_started")" "$WORK/smoke.out"
log "smoke: OK"

# --- 3b. --wheels DIR: packages this Python lacks (Keras), without network -----
failures=0
if [[ -n $WHEELS ]]; then
    WHEEL_SITE=$WORK/wheels
    rm -rf "$WHEEL_SITE"
    log "=== wheels: pip install --no-index --no-deps --target $WHEEL_SITE $WHEELS/*.whl"
    wheels_started=$(now)
    timeout 120 "$PY" -m pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check \
        --target "$WHEEL_SITE" "$WHEELS"/*.whl > "$WORK/wheels.out" 2>&1
    wheels_rc=$?
    cat "$WORK/wheels.out" >> "$LOG"
    "$PY" "$SUMMARIZE" env "$SUMMARY" wheels "$(cd "$WHEELS" && ls -- *.whl | tr '\n' ' ')"
    if [[ $wheels_rc -ne 0 ]]; then
        tail -n 15 "$WORK/wheels.out"
        "$PY" "$SUMMARIZE" case "$SUMMARY" wheels fail "$(since "$wheels_started")" "$WORK/wheels.out" \
            "pip exited $wheels_rc installing the wheels of $WHEELS"
        log "--- wheels: fail (pip exited $wheels_rc)"
        failures=$((failures + 1))
    else
        # After the build under test: a wheel of hvdlite in DIR must not shadow it.
        export PYTHONPATH="$SITE:$WHEEL_SITE${PYTHONPATH#"$SITE"}"
        log "wheels: installed in $WHEEL_SITE"
    fi
fi

# --- 4. the cases ----------------------------------------------------------
selected() {
    [[ -z ${DEVICE_CHECK_CASES:-} ]] && return 0
    [[ " $DEVICE_CHECK_CASES " == *" $1 "* ]]
}

# Whether Keras imports on the case's backend (keras_jax: jax); if not, the
# case is skipped without --wheels, and fails with it (see its output).
keras_imports() {  # NAME OUT LIMIT
    local backend=${1#keras_}
    (cd "$RUN_DIR" && KERAS_BACKEND=$backend timeout -k 5 "$3" "$PY" -c \
        'import keras; print("keras", keras.__version__, "on", keras.backend.backend())') > "$2" 2>&1
}

run_case() {  # NAME RANKS TIMEOUT WORKER
    local name=$1 ranks=$2 budget=$3 worker=$WORKERS/$4.py
    local out=$WORK/$name.out note="" status
    if ! selected "$name"; then
        return
    fi
    local remaining=$((DEADLINE - (SECONDS - START)))
    if ((remaining < 20)); then
        printf 'not run: the check reached DEVICE_CHECK_DEADLINE=%ss\n' "$DEADLINE" > "$out"
        "$PY" "$SUMMARIZE" case "$SUMMARY" "$name" skip 0 "$out" "out of time (DEVICE_CHECK_DEADLINE=$DEADLINE)"
        log "--- $name: skip (out of time)"
        failures=$((failures + 1))
        return
    fi
    if [[ $name == keras_* ]] && ! keras_imports "$name" "$out" $((remaining < 60 ? remaining : 60)); then
        cat "$out" >> "$LOG"
        if [[ -z $WHEELS ]]; then
            note="skipped: keras not importable (pass --wheels DIR)"
            "$PY" "$SUMMARIZE" case "$SUMMARY" "$name" skip 0 "$out" "$note"
            log "--- $name: skip (keras not importable; pass --wheels DIR)"
        else
            note="keras does not import with the wheels of $WHEELS installed (see the last lines)"
            "$PY" "$SUMMARIZE" case "$SUMMARY" "$name" fail 0 "$out" "$note"
            log "--- $name: fail ($note)"
            tail -n 5 "$out"
            failures=$((failures + 1))
        fi
        return
    fi
    [[ $name == keras_* ]] && cat "$out" >> "$LOG"  # the version Keras probed
    remaining=$((DEADLINE - (SECONDS - START)))
    local limit=$((budget < remaining ? budget : remaining))
    ((limit >= 1)) || limit=1  # timeout 0 would mean none
    local command
    if [[ $name == bench ]]; then
        command=("$PY" "$BENCH" --out "$OUT/bench.json")
    else
        command=("$PY" -m hvdlite.runner -np "$ranks" "$PY" "$worker" "$name")
    fi
    log "=== $name: $ranks rank(s), timeout ${limit}s"
    local started
    started=$(now)
    (cd "$RUN_DIR" && timeout -k 10 "$limit" "${command[@]}") > "$out" 2>&1
    local rc=$?
    local seconds
    seconds=$(since "$started")
    cat "$out" >> "$LOG"
    local oks
    oks=$(grep -c -E "(^|:)$name OK" "$out")
    # 124: timeout ran out; 137 after the limit: it had to SIGKILL. A 137
    # before the limit is the launcher passing on a rank's SIGKILL (killed).
    if [[ $rc -eq 124 ]] || { [[ $rc -eq 137 ]] && awk -v s="$seconds" -v l="$limit" 'BEGIN { exit !(s >= l) }'; }; then
        status=timeout
        note="no result within ${limit}s"
    elif [[ $name == killed ]]; then
        # The survivor fails in time naming the lost rank, and the launcher
        # exits non-zero, promptly.
        if [[ $rc -ne 0 && $oks -ge 1 ]] && awk -v s="$seconds" 'BEGIN { exit !(s < 60) }'; then
            status=pass
        else
            status=fail
            note="launcher exit $rc after ${seconds}s; survivor OK lines: $oks (want: non-zero exit, 1 line, under 60 s; hvdliterun SIGKILLs survivors 5 s after the first failure, so one that had not failed by then printed nothing)"
        fi
    elif [[ $rc -eq 0 && $oks -eq $ranks ]]; then
        status=pass
    else
        status=fail
        note="exit $rc; '$name OK' from $oks of $ranks rank(s)"
    fi
    "$PY" "$SUMMARIZE" case "$SUMMARY" "$name" "$status" "$seconds" "$out" "$note"
    grep -h "DEVICE_CHECK_RESULT" "$out"
    if [[ $status != pass ]]; then
        failures=$((failures + 1))
        echo "--- last lines of $name:"
        tail -n 25 "$out"
    fi
    log "--- $name: $status in ${seconds}s${note:+ ($note)}"
}

for entry in "${CASES[@]}"; do
    # shellcheck disable=SC2086
    run_case $entry
done

"$PY" "$SUMMARIZE" table "$SUMMARY" > /dev/null  # validates it before the verdict
finish_check "$failures"
