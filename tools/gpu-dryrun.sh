#!/usr/bin/env bash
# tools/gpu-dryrun.sh - tools/gpu-session.sh and the make gpu-* targets run
# here, with no GPU, on stand-ins: every CUDA program replaced by a script
# that never ends (one of them ignoring TERM), fails or passes, a
# compute-sanitizer that runs its program as a child, and an nvidia-smi that
# lists a GPU. What a lent GPU machine must not find out the hard way:
#   - gpu-test, gpu-examples and gpu-bench end within their deadlines
#     whatever their programs do, run every program or name it, and print
#     their closing FAILED line naming each that failed, timed out or did
#     not run;
#   - the per-program bounds add up within the deadline (none starves the
#     rest);
#   - gpu-bench at gpu-session's bound (200 s) and at its own default runs
#     both builds;
#   - the graph example gets the Kronecker file carried in build/gpu and no
#     graph is generated there;
#   - an outer `timeout` around gpu-session.sh ends every process a step
#     started (make, the runner, the sanitizer and its program), none left.
# Runs in a copy of the scripts under a temporary folder (the build/ here is
# not touched); about 30 s, nearly all of it waiting. Prints a PASS or FAIL
# line per check; exit status 1 if any failed. make gpu-dryrun runs it.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
[ -n "${DRY_KEEP:-}" ] && echo "gpu-dryrun: keeping $tmp" || trap 'rm -rf "$tmp"' EXIT
repo=$tmp/repo calls=$tmp/calls
fails=0
check() { # check WHAT CONDITION-STATUS [DETAIL]
    if [ "$2" = 0 ]; then echo "PASS $1"; else echo "FAIL $1${3:+: $3}"; fails=$((fails + 1)); fi
}

# The copy: the Makefile and scripts, the CUDA sources as empty files (the
# Makefile lists its programs from them), and stand-ins built where
# make gpu-prebuild puts the programs.
mkdir -p "$repo/tools" "$repo/bench" "$tmp/bin" "$repo/build/gpu/bin"
cp "$root/Makefile" "$root/gpumem.h" "$repo/"
cp "$root"/tools/*.sh "$repo/tools/"
cp "$root/bench/plot_gpu.py" "$root/bench/plot_with.py" "$repo/bench/"
for f in "$root"/tests/cuda/*.cu "$root"/examples/cuda/*.cu "$root"/bench/cuda/*.cu; do
    mkdir -p "$repo/$(dirname "${f#"$root"/}")"
    : > "$repo/${f#"$root"/}"
done
# A stand-in records its pid, name, arguments and bounds, then does what
# DRY_HANG, DRY_STUBBORN (hangs, ignoring TERM), DRY_FAIL or DRY_SPEND say
# for its name (space-separated program names, or "all"), else passes.
# DRY_SPEND: it takes its whole bound and grace without waiting for them, by
# moving the clock that the scripts read (the date below) on by that much.
cat > "$tmp/stand-in" <<EOF
#!/bin/sh
n=\$(basename "\$0")
echo "\$\$ \$n \$* run_bound=\${GPUMEM_RUN_BOUND_S:-} bench_bound=\${GPU_BENCH_BOUND:-} require=\${GPUMEM_REQUIRE_GPU:-}" >> $calls
named() { case " \$1 " in *" all "* | *" \$n "*) return 0;; esac; return 1; }
if named "\${DRY_STUBBORN:-}"; then trap '' TERM; exec sleep 100000; fi
if named "\${DRY_HANG:-}"; then exec sleep 100000; fi
if named "\${DRY_FAIL:-}"; then exit 1; fi
if named "\${DRY_SPEND:-}"; then
    echo \$(( \$(cat $tmp/clock) + \${GPU_BENCH_BOUND:-\${GPUMEM_RUN_BOUND_S:-0}} + \$GPU_RUN_GRACE )) > $tmp/clock
fi
exit 0
EOF
chmod +x "$tmp/stand-in"
progs=""
for f in "$repo"/tests/cuda/*.cu; do progs="$progs cuda/$(basename "$f" .cu).bin"; done
for f in "$repo"/examples/cuda/*.cu; do progs="$progs cuda/examples/$(basename "$f" .cu)"; done
for f in "$repo"/bench/cuda/*.cu; do progs="$progs cuda/$(basename "$f" .cu).bin cuda/$(basename "$f" .cu)_nostats.bin"; done
for p in $progs graph; do mkdir -p "$(dirname "$repo/build/gpu/$p")"; cp "$tmp/stand-in" "$repo/build/gpu/$p"; done
graph=build/kron-gpu-s$(sed -n 's/^GPU_GRAPH_SCALE ?= //p' "$root/Makefile").graph # the Makefile's name for it
echo "stand-in graph file" > "$repo/${graph/build/build/gpu}"
tests=$(cd "$repo" && for f in tests/cuda/*.cu; do echo "build/cuda/$(basename "$f" .cu).bin"; done)
cat > "$tmp/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in -L) echo "GPU 0: Stand-in GPU (UUID: GPU-dryrun)";; *) echo "name, driver_version"; echo "Stand-in GPU, 0";; esac
EOF
cat > "$tmp/bin/compute-sanitizer" <<'EOF'
#!/bin/sh
# the real one's arguments: --tool T --error-exitcode=1 PROGRAM ARGS; runs PROGRAM as its child
while [ $# -gt 0 ]; do case $1 in --tool) shift 2;; --*) shift;; *) break;; esac; done
"$@"
EOF
# The scripts' clock (date +%s), DRY_SPEND's seconds ahead of the real one.
echo 0 > "$tmp/clock"
real_date=$(command -v date)
cat > "$tmp/bin/date" <<EOF
#!/bin/sh
[ "\$*" = +%s ] && exec echo \$(( \$($real_date +%s) + \$(cat $tmp/clock) ))
exec $real_date "\$@"
EOF
chmod +x "$tmp/bin/nvidia-smi" "$tmp/bin/compute-sanitizer" "$tmp/bin/date"
export PATH="$tmp/bin:$PATH" GPU_RUN_GRACE=1 GPUMEM_NO_INSTALL=1
unset OUT COMPUTE_SANITIZER GPU_BENCH_BOUND GPU_TEST_DEADLINE GPU_EXAMPLES_DEADLINE

session() { # session MODE: the session script, output and logs in $tmp/MODE{.txt,/}; sets rc and took
    local t0
    t0=$(date +%s)
    # An outer bound far past every deadline here: if the deadlines broke,
    # the stand-ins (which never end) would otherwise hang make test.
    (cd "$repo" && timeout -k 5 180 bash tools/gpu-session.sh "$1" "$tmp/$1") > "$tmp/$1.txt" 2>&1
    rc=$?
    took=$(($(date +%s) - t0))
}
last_failed() { grep "^$1: FAILED:" "$2" | tail -n 1; }
# Every stand-in recorded in $calls has ended (a second for the KILLs in flight).
all_ended() {
    local pid rest alive=""
    sleep 1
    while read -r pid rest; do
        { tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | grep -q sleep && alive="$alive $pid"
    done < "$calls"
    [ -z "$alive" ] || { echo "  still running:$alive"; ps -o pid,pgid,args -p "${alive# }" | sed 's/^/  /'; return 1; }
}

echo "== 1. every program never ends: each step ends at its deadline and names them all"
: > "$calls"
DRY_HANG=all DRY_STUBBORN=test_cache_gpu.bin GPU_SESSION_TEST_S=12 GPU_SESSION_BENCH_S=6 session all
# Its deadlines are wall-clock ones; the stand-ins never end, so what this
# checks is that the deadlines end the session. The slack (30 s) is for
# starting make and the scripts on a loaded machine, not a measure of speed.
check "session ends within its deadlines (took $took s of 12 + 6)" $([ $took -le 48 ]; echo $?)
check "session fails (status $rc)" $([ $rc = 1 ]; echo $?)
line=$(last_failed gpu-test "$tmp/all/gpu-test.log")
miss=""
for t in $tests; do case "$line" in *" $t"*) ;; *) miss="$miss $t";; esac; done
check "gpu-test's FAILED line names every test" $([ -z "$miss" ] && [ -n "$line" ]; echo $?) "missing$miss in '$line'"
check "the test that ignores TERM was KILLed (timed out)" $(echo "$line" | grep -q "timed out:.*test_cache_gpu.bin"; echo $?) "$line"
line=$(last_failed gpu-bench "$tmp/all/gpu-bench.log")
check "gpu-bench's FAILED line names both builds (timed out or not run)" \
    $(echo "$line" | grep -q "bench_gpu.bin" && echo "$line" | grep -q "bench_gpu_nostats.bin"; echo $?) "$line"
all_ended
check "no stand-in left running" $?

echo "== 2. one test fails, one never ends, the rest pass; then the sanitizer runs the same"
: > "$calls"
DRY_FAIL=test_nvme_gpu.bin DRY_HANG=test_cache_gpu.bin GPU_SESSION_TEST_S=20 session all
line=$(last_failed gpu-test "$tmp/all/gpu-test.log")
check "failed and timed-out tests named, the others not" \
    $([ "$line" = "gpu-test: FAILED: failed: build/cuda/test_nvme_gpu.bin; timed out: build/cuda/test_cache_gpu.bin" ]; echo $?) "$line"
ran=$(grep -c ' test_.*_gpu.bin ' "$calls")
check "every test ran ($ran of $(echo $tests | wc -w))" $([ "$ran" = "$(echo $tests | wc -w)" ]; echo $?)
check "each test was told its bound (GPUMEM_RUN_BOUND_S) and GPUMEM_REQUIRE_GPU=1" \
    $(! grep ' test_.*_gpu.bin ' "$calls" | grep -v 'run_bound=[1-9][0-9]* .*require=1$' | grep -q .; echo $?)
: > "$calls"
DRY_HANG=test_cache_gpu.bin GPU_SESSION_TEST_S=30 session sanitize
line=$(last_failed gpu-test "$tmp/sanitize/gpu-test-sanitize.log")
check "sanitizer runs: the hung program named under both tools" \
    $([ "$line" = "gpu-test: FAILED: timed out: memcheck:build/cuda/test_cache_gpu.bin synccheck:build/cuda/test_cache_gpu.bin" ]; echo $?) "$line"
check "sanitizer runs: --small everywhere, --fused where set" \
    $(grep -q "test_nvme_gpu.bin --small --fused" "$calls" && grep -q "test_tier_gpu.bin --small" "$calls"; echo $?)
all_ended
check "no stand-in left running (the sanitizer's child included)" $?

echo "== 3. an outer timeout ends everything the step started"
: > "$calls"
t0=$(date +%s)
(cd "$repo" && DRY_HANG=all GPU_SESSION_TEST_S=100 timeout 4 bash tools/gpu-session.sh all "$tmp/outer") > "$tmp/outer.txt" 2>&1
took=$(($(date +%s) - t0))
check "the session stopped at the outer timeout (took $took s; slack for a loaded machine)" $([ $took -le 20 ]; echo $?)
check "it says so and names the step" $(grep -q "gpu-session: FAILED: gpu-test(stopped)" "$tmp/outer.txt"; echo $?)
check "the runner named the program it stopped and the rest" $(grep -q "gpu-test: FAILED: stopped: .*; not run: " "$tmp/outer/gpu-test.log"; echo $?)
all_ended
check "no stand-in left running" $?
left=""
for f in /proc/[0-9]*/cmdline; do
    { tr '\0' ' ' < "$f"; } 2>/dev/null | grep -q "GPU_PREBUILT=1 gpu-test GPU_SANITIZE=0 GPU_TEST_DEADLINE=100" && left="$left $f"
done
check "no make left running" $([ -z "$left" ]; echo $?) "$left"

echo "== 4. gpu-bench runs both builds at gpu-session's bound and at its default"
: > "$calls"
DRY_SPEND="bench_gpu.bin bench_gpu_nostats.bin" session all
b1=$(awk '$2 == "bench_gpu.bin" { sub("bench_bound=", "", $5); print $5 }' "$calls")
b2=$(awk '$2 == "bench_gpu_nostats.bin" { sub("bench_bound=", "", $5); print $5 }' "$calls")
check "at 200 s, each taking its whole bound: both ran (bounds ${b1:-none} and ${b2:-none} s), 30 s or more each" \
    $([ -n "$b1" ] && [ -n "$b2" ] && [ "$b1" -ge 30 ] && [ "$b2" -ge 30 ] && [ $((b1 + b2 + 2)) -le 200 ]; echo $?)
check "at 200 s: the session passed (status $rc)" $([ $rc = 0 ]; echo $?)
: > "$calls"
(cd "$repo" && make --no-print-directory GPU_PREBUILT=1 gpu-bench) > "$tmp/bench-default.txt" 2>&1
check "at the default bound: both ran" $([ "$(grep -c ' bench_gpu.*bin ' "$calls")" = 2 ]; echo $?)
(cd "$repo" && make --no-print-directory GPU_PREBUILT=1 GPU_BENCH_BOUND=100 gpu-bench) > "$tmp/bench-short.txt" 2>&1
check "a bound under 160 s is named as too short" $(grep -q "under the 160 s" "$tmp/bench-short.txt"; echo $?)

echo "== 5. the graph example reads the carried Kronecker file; nothing generates one"
: > "$calls"
session examples
check "examples pass (status $rc)" $([ $rc = 0 ]; echo $?)
check "graph ran on $graph" $(grep -q " graph $graph " "$calls"; echo $?)
check "the host graph tool never ran on the device" $(! grep -q " graph gen" "$calls"; echo $?)
rm "$repo/${graph/build/build/gpu}" "$repo/$graph"
session examples
check "without the carried file the session refuses up front (status $rc)" \
    $([ $rc = 2 ] && grep -q "not built:.*kron-gpu-s<scale>.graph" "$tmp/examples.txt"; echo $?)

[ $fails = 0 ] && echo "gpu-dryrun: every check passed" || echo "gpu-dryrun: $fails check(s) FAILED"
[ $fails = 0 ]
