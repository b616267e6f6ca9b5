#!/bin/sh
# SPDX-License-Identifier: MIT
# fuzz.sh DIR SECONDS NAME...: run the libFuzzer harnesses DIR/fuzz_NAME
# (make fuzz builds them): each first over its committed seeds
# (tests/fuzz/corpus/NAME) and what earlier runs found (DIR/corpus/NAME),
# then for SECONDS more (0: the seeds alone). Every harness runs, whatever
# the others did; a crash or a violated property keeps its input as
# DIR/artifacts/NAME-* and the log as DIR/NAME.log, and the last lines
# name every harness that failed (exit 1). New inputs go to DIR/corpus,
# never into the tree: tests/fuzz/README.md says how one becomes a seed.
set -u
dir=$1
seconds=$2
shift 2
failed=
summary=
mkdir -p "$dir/artifacts"
for name in "$@"; do
    bin=$dir/fuzz_$name
    corpus=$dir/corpus/$name
    seeds=tests/fuzz/corpus/$name
    log=$dir/$name.log
    mkdir -p "$corpus"
    [ -d "$seeds" ] && cp "$seeds"/* "$corpus"/ 2>/dev/null
    # -rss_limit_mb: a harness that grows past 2 GiB is a finding (the
    # trace reader once asked for more per line number); -timeout: one
    # input taking 20 s is one (the machine is shared, so not less).
    if [ "$seconds" = 0 ]; then limit=-runs=0; else limit=-max_total_time=$seconds; fi
    echo "== fuzz_$name: $( [ "$seconds" = 0 ] && echo "the seeds" || echo "the seeds, then ${seconds} s")"
    if "$bin" "$limit" -print_final_stats=1 -rss_limit_mb=2048 -timeout=20 -max_len=4096 \
        -artifact_prefix="$dir/artifacts/$name-" "$corpus" > "$log" 2>&1; then
        result=ok
    else
        result=FAILED
        failed="$failed $name"
        grep -A4 'property violated\|ERROR:\|runtime error' "$log" | head -n 20
        echo "   log: $log; input: $(ls -t "$dir/artifacts/$name-"* 2>/dev/null | head -n 1)"
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    units=$(ls "$corpus" | wc -l)
    line=$(printf '%-12s %-7s %10s inputs run %7s/s  corpus %s' "$name" "$result" "${runs:-?}" "${rate:-?}" "$units")
    echo "   $line"
    summary="$summary
   $line"
done
echo "== fuzz: ${seconds} s a harness$summary"
if [ -n "$failed" ]; then
    # Said again last, where a CI log's tail shows it: each failure's first
    # report line and its input as base64 (up to 3 KiB), so that a finding on
    # a machine whose build/ is gone can still be run again here.
    for name in $failed; do
        input=$(ls -t "$dir/artifacts/$name-"* 2>/dev/null | head -n 1)
        echo "fuzz: $name: $(grep -m 1 -A 1 'property violated\|ERROR:\|runtime error' "$dir/$name.log" | tr '\n' ' ')"
        if [ -n "$input" ] && [ "$(wc -c < "$input")" -le 3072 ]; then
            echo "fuzz: $name: input (base64 -d > FILE): $(base64 < "$input" | tr -d '\n')"
        fi
    done
    echo "fuzz: FAILED:$failed (inputs in $dir/artifacts; run one again with $dir/fuzz_NAME INPUT)"
    exit 1
fi
