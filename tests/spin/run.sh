#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/spin/run.sh [-j N] [OUT]: run every Spin model of tests/spin
# (docs/models.md): each real configuration must exhaust its state space
# with 0 errors, each seeded bug must make pan report an error. Prints the
# states, depth and time of each run; exit 1 if any run did not do what it
# must. OUT (default build/spin) holds one folder per run: pan's source,
# binary, output, and the error trail of a seeded run. -j N runs N at once
# (default 2). `make spin` runs this.
set -u
here=$(cd "$(dirname "$0")" && pwd)
jobs=2
mode=all
if [ "${1:-}" = --one ]; then mode=one; name1=$2; shift 2; fi
if [ "${1:-}" = -j ]; then jobs=$2; shift 2; fi
out=${1:-build/spin}

# name | model | spin flags | must: exhaust (0 errors, search complete) or fail
runs() {
    cat <<'EOF'
sq-batch|sq|-DDEPTH=4 -DLOG2D=2 -DW=3 -DSTART=0 -DNTOTAL=4|exhaust
sq-wrap|sq|-DDEPTH=2 -DLOG2D=1 -DW=3 -DSTART=4 -DNTOTAL=5|exhaust
sq-bug1-lap|sq|-DDEPTH=2 -DLOG2D=1 -DW=3 -DSTART=4 -DNTOTAL=5 -DSEEDED_BUG=1|fail
sq-bug2-bam-wrap|sq|-DDEPTH=2 -DLOG2D=1 -DW=3 -DSTART=4 -DNTOTAL=5 -DSEEDED_BUG=2|fail
sq-bug3-no-recheck|sq|-DDEPTH=4 -DLOG2D=2 -DW=3 -DSTART=0 -DNTOTAL=4 -DSEEDED_BUG=3|fail
cq-laps|cq|-DDEPTH=2 -DLOG2D=1 -DNCID=2 -DW=3 -DSTART=4 -DREQ0=3 -DREQ1=2|exhaust
cq-batch|cq|-DDEPTH=4 -DLOG2D=2 -DNCID=3 -DW=3 -DSTART=0 -DREQ0=2 -DREQ1=1|exhaust
cq-bug1-head-past|cq|-DDEPTH=2 -DLOG2D=1 -DNCID=2 -DW=3 -DSTART=4 -DREQ0=3 -DREQ1=2 -DSEEDED_BUG=1|fail
cq-bug2-cid-reuse|cq|-DDEPTH=2 -DLOG2D=1 -DNCID=2 -DW=3 -DSTART=4 -DREQ0=3 -DREQ1=2 -DSEEDED_BUG=2|fail
cq-bug3-no-recheck|cq|-DDEPTH=2 -DLOG2D=1 -DNCID=2 -DW=3 -DSTART=4 -DREQ0=3 -DREQ1=2 -DSEEDED_BUG=3|fail
reset|reset|-DREQS=2|exhaust
reset-bug1-gate-toctou|reset|-DREQS=2 -DSEEDED_BUG=1|fail
reset-bug2-hush-no-locks|reset|-DREQS=2 -DSEEDED_BUG=2|fail
reset-bug3-abort-first|reset|-DREQS=2 -DSEEDED_BUG=3|fail
reset-bug4-closed-gives-up|reset|-DREQS=2 -DSEEDED_BUG=4|fail
reset-bug5-open-first|reset|-DREQS=2 -DSEEDED_BUG=5|fail
share|share||exhaust
share-catchup|share|-DCATCHUP_RUN=1|exhaust
share-bug1-take-aba|share|-DSEEDED_BUG=1|fail
share-bug2-no-catchup|share|-DCATCHUP_RUN=1 -DSEEDED_BUG=2|fail
share-bug3-no-fence|share|-DSEEDED_BUG=3|fail
line|line||exhaust
line-bug1-no-recount|line|-DSEEDED_BUG=1|fail
line-bug2-prefetch-holds|line|-DSEEDED_BUG=2|fail
line-bug3-undo-evicts|line|-DSEEDED_BUG=3|fail
EOF
}

# One run, by name: its result line into $out/NAME/result.
one() {
    line=$(runs | grep "^$1|")
    name=${line%%|*}; rest=${line#*|}
    model=${rest%%|*}; rest=${rest#*|}
    flags=${rest%%|*}; must=${rest#*|}
    d=$out/$name
    rm -rf "$d" && mkdir -p "$d" || exit 1
    cp "$here/$model.pml" "$d/" || exit 1
    # Seeded runs stop at their first error: -O0, quickest to compile; the
    # real ones -O1 (as fast as -O2 to search, quicker to compile).
    opt=-O1; [ "$must" = fail ] && opt=-O0
    ( cd "$d" &&
      # shellcheck disable=SC2086
      spin $flags -a "$model.pml" > spin.out 2>&1 &&
      ${CC:-cc} $opt -w -DSAFETY -DMEMLIM=3072 -o pan pan.c > cc.out 2>&1 &&
      { ./pan -m200000 > pan.out 2>&1; true; } ) || { echo "$name|$model|$must|BUILD-FAILED|-|-|-|see $d" > "$d/result"; return; }
    p=$d/pan.out
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$p" | head -n 1)
    states=$(sed -n 's/^ *\([0-9][0-9]*\) states, stored.*/\1/p' "$p" | head -n 1)
    depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$p" | head -n 1)
    secs=$(sed -n 's/^pan: elapsed time \([0-9.e+-]*\) seconds.*/\1/p' "$p" | head -n 1)
    first=$(grep -m 1 '^pan:1: ' "$p" | sed 's/^pan:1: //; s/ (at depth [0-9]*)//' | cut -c 1-70)
    incomplete=0
    if grep -q 'Search not completed\|max search depth too small\|reached -DMEMLIM' "$p"; then incomplete=1; fi
    verdict=WRONG
    if [ "$must" = exhaust ]; then
        [ "${errors:-x}" = 0 ] && [ $incomplete = 0 ] && verdict=ok
        [ "${errors:-0}" != 0 ] && first="$first (trail: $d)"
        [ "${errors:-x}" = 0 ] && [ $incomplete = 1 ] && first="search not completed"
    else
        [ "${errors:-0}" -ge 1 ] 2>/dev/null && verdict=ok
        [ $verdict = WRONG ] && first="no error found: the check cannot fail"
    fi
    echo "$name|$model|$must|$verdict|${states:-?}|${depth:-?}|${secs:-?}|$first" > "$d/result"
}

if [ $mode = one ]; then one "$name1"; exit 0; fi

command -v spin >/dev/null 2>&1 || { echo "spin: Spin is not installed (sh tools/deps.sh spin)"; exit 2; }
mkdir -p "$out" || exit 1
start=$(date +%s)
runs | cut -d'|' -f1 | xargs -P "$jobs" -I{} sh "$0" --one {} "$out"
end=$(date +%s)
fail=0
printf '%-27s %-8s %-6s %10s %6s %8s  %s\n' run must verdict states depth time/s "pan's first error"
for name in $(runs | cut -d'|' -f1); do
    r=$(cat "$out/$name/result" 2>/dev/null || echo "$name|?|?|MISSING|-|-|-|")
    echo "$r" | awk -F'|' '{ printf "%-27s %-8s %-6s %10s %6s %8s  %s\n", $1, $3, $4, $5, $6, $7, $8 }'
    case $r in *"|ok|"*) ;; *) fail=1 ;; esac
done
echo "spin: $(runs | wc -l | tr -d ' ') runs in $((end - start)) s ($jobs at a time)$( [ $fail = 0 ] && echo ': every model exhausted with 0 errors, every seeded bug found' || echo ': FAILED')"
exit $fail
