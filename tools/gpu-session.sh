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
# (build/gpu holds the programs at their paths under build/, and the graph
# example's Kronecker file, build/kron-gpu-s17.graph; the script puts them there,
# so that make finds them and builds nothing: GPU_PREBUILT=1.)
#
# Its steps, each ending within its deadline (seconds, and the variable that
# changes it); inside a step tools/gpu-runs.sh shares the deadline out among
# the programs, so that the first cannot starve the rest, and its last line
# names every program that failed, timed out or did not run:
#   all (default): make gpu-test without its compute-sanitizer runs
#                  (GPU_SESSION_TEST_S, 140), then make gpu-bench, both builds
#                  and the plot if it can (GPU_SESSION_BENCH_S, 200; under
#                  160 the nostats build is cut short, see the Makefile);
#   examples:      make gpu-examples (GPU_SESSION_EXAMPLES_S, 200);
#   sanitize:      make gpu-test's sanitizer runs alone (GPU_SESSION_TEST_S, 360).
# A step's make also has a backstop `timeout` 30 s after its deadline. Stopped
# from outside (an outer `timeout`: TERM, INT or HUP), the script ends every
# process the step started, names the step, and exits 143.
#
# tools/gpu-dryrun.sh (make gpu-dryrun) runs this script here, with no GPU,
# on stand-in programs that never end, fail or pass.
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
for f in build/cuda/bench_gpu.bin build/cuda/bench_gpu_nostats.bin build/cuda/examples/hello \
         build/cuda/test_nvme_gpu.bin; do
    [ -f "$f" ] || missing="$missing $f"
done
compgen -G 'build/kron-gpu-s*.graph' >/dev/null || missing="$missing build/kron-gpu-s<scale>.graph"
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

failed="" step_pid=""
# step NAME SECONDS make-arguments...: make, bounded by its own deadline
# (passed in the arguments) and by `timeout` 30 s later as a backstop. The
# backstop's timeout puts make in a process group of its own (its pid), and
# tools/gpu-runs.sh each program in one below it; so a TERM, INT or HUP to
# this script (an outer `timeout`) is passed on to the step's group here,
# gpu-runs.sh passes it on to its program's group, and everything the step
# started ends with it (end_step) instead of running on in the background
# and holding the GPU. Make runs in the background so that the signal is
# handled at once (wait returns on a trapped signal).
end_step() {
    [ -n "$step_pid" ] || return 0
    kill -TERM -- "-$step_pid" 2>/dev/null || kill -TERM "$step_pid" 2>/dev/null
    # Up to 15 s to end (gpu-runs.sh KILLs its program 5 s after a TERM),
    # then KILL whatever of the group is left.
    local i
    for i in $(seq 30); do kill -0 "$step_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$step_pid" 2>/dev/null
    wait "$step_pid" 2>/dev/null
    step_pid=""
}
on_signal() {
    trap '' TERM INT HUP
    echo "== gpu-session: stopped from outside during ${step_name:-setup}: ending its processes"
    end_step
    [ -n "${step_log:-}" ] && tail -n 40 "$step_log"
    echo "gpu-session: FAILED:$failed ${step_name:-setup}(stopped)"
    exit 143
}
trap on_signal TERM INT HUP
step() {
    step_name=$1
    local bound=$2
    shift 2
    step_log=$out/$step_name.log
    echo "== gpu-session: $step_name (at most $bound s), log $step_log"
    timeout -k 10 $((bound + 30)) make --no-print-directory GPU_PREBUILT=1 "$@" > "$step_log" 2>&1 &
    step_pid=$!
    wait "$step_pid"
    local rc=$?
    step_pid=""
    tail -n 40 "$step_log"
    [ $rc = 0 ] || { failed="$failed $step_name"; echo "== gpu-session: $step_name FAILED (status $rc)"; }
    step_name="" step_log=""
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
