#!/usr/bin/env bash
# tools/gpu-session.sh - the project's GPU checks in one call that fits a
# lent GPU machine: at most 600 s a command, and 15 minutes of device time in
# all, its start included (../.library/device/README.md). Nothing is built
# there: nvcc would spend minutes of that time. Build here first, no GPU
# needed:
#
#     make gpu-prebuild
#
# then, on the device, one call per step, each well inside the 600 s:
#
#     run(command="bash tools/gpu-session.sh", carry=["build/gpu"], timeout_s=420)
#     run(command="bash tools/gpu-session.sh examples", carry=["build/gpu"], timeout_s=260)
#     run(command="bash tools/gpu-session.sh sanitize", carry=["build/gpu"], timeout_s=420)
#
# The first two, run to every bound, take about 11 of a session's 15
# minutes with a start of 2; steps that end sooner leave room for the third.
#
# (build/gpu holds the programs at their paths under build/; the script puts
# them there, so that make finds them and builds nothing: GPU_PREBUILT=1.)
#
# Its steps, each bounded (seconds, and the variable that changes it):
#   all (default): make gpu-test without its compute-sanitizer runs
#                  (GPU_SESSION_TEST_S, 140), then make gpu-bench, both builds
#                  and the plot if it can (GPU_SESSION_BENCH_S, 200);
#   examples:      make gpu-examples (GPU_SESSION_EXAMPLES_S, 200);
#   sanitize:      make gpu-test's sanitizer runs alone (GPU_SESSION_TEST_S, 360).
#
# The device's description, each step's log and (mode all) build/results as
# one archive, results.tgz, go to $OUT (the device tool's folder that comes
# back: at most 8 files), or to the folder given as the second argument, or
# build/gpu-session. A step that fails or runs out of time does not stop the
# next; the exit status is 1 if any step failed. Nothing is installed
# (GPUMEM_NO_INSTALL=1): the machine may reach no package registry; a make
# that gpu-prebuild copied is used where the machine has none.
set -u
cd "$(dirname "$0")/.." || exit 2 # the repository root: make and the build/ paths
mode=${1:-all}
out=${2:-${OUT:-build/gpu-session}}
mkdir -p "$out" || exit 2
case $mode in all|examples|sanitize) ;; *) echo "usage: $0 [all|examples|sanitize] [out dir]"; exit 2;; esac
export GPUMEM_NO_INSTALL=1

# Into place, keeping their times (-p) and never over a newer build (-u): in
# a working tree with sources changed since, make still sees them as stale.
[ -d build/gpu ] && cp -r -p -u build/gpu/. build/
command -v make >/dev/null || export PATH="$PWD/build/bin:$PATH" # gpu-prebuild's copy
command -v make >/dev/null || { echo "gpu-session: no make here, and none carried in build/gpu/bin"; exit 2; }
missing=""
for f in build/graph build/cuda/bench_gpu.bin build/cuda/bench_gpu_nostats.bin build/cuda/examples/hello \
         build/cuda/test_nvme_gpu.bin; do
    [ -x "$f" ] || missing="$missing $f"
done
if [ -n "$missing" ]; then
    echo "gpu-session: not built:$missing (run make gpu-prebuild where nvcc is, and carry build/gpu)"
    exit 2
fi

{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nproc; } > "$out/device.txt" 2>&1
cat "$out/device.txt"
if ! grep -q '^GPU ' "$out/device.txt"; then # nvidia-smi -L's lines, just written
    echo "gpu-session: nvidia-smi lists no GPU here: nothing to run (the make gpu-* targets say the same)"
    exit 2
fi

failed=""
# step NAME SECONDS make-arguments...: make, bounded by its own deadline
# (passed in the arguments) and by `timeout` 30 s later as a backstop.
step() {
    local name=$1 bound=$2
    shift 2
    echo "== gpu-session: $name (at most $bound s), log $out/$name.log"
    timeout -k 10 $((bound + 30)) make --no-print-directory GPU_PREBUILT=1 "$@" > "$out/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$out/$name.log"
    [ $rc = 0 ] || { failed="$failed $name"; echo "== gpu-session: $name FAILED (status $rc)"; }
}

case $mode in
sanitize)
    t=${GPU_SESSION_TEST_S:-360}
    step gpu-test-sanitize "$t" gpu-test GPU_TEST_PLAIN=0 GPU_TEST_DEADLINE="$t" ;;
examples)
    t=${GPU_SESSION_EXAMPLES_S:-200}
    step gpu-examples "$t" gpu-examples GPU_EXAMPLES_DEADLINE="$t" ;;
*)
    t=${GPU_SESSION_TEST_S:-140}
    step gpu-test "$t" gpu-test GPU_SANITIZE=0 GPU_TEST_DEADLINE="$t"
    t=${GPU_SESSION_BENCH_S:-200}
    step gpu-bench "$t" gpu-bench GPU_BENCH_BOUND="$t" ;;
esac

if [ "$mode" = all ] && [ -d build/results ]; then tar czf "$out/results.tgz" -C build results; fi
if [ -n "$failed" ]; then echo "gpu-session: FAILED:$failed"; exit 1; fi
echo "gpu-session: every step passed ($mode)"
