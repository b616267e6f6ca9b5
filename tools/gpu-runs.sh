#!/bin/sh
# tools/gpu-runs.sh - run programs one after another within one deadline,
# each bounded, and name every one that failed, timed out or did not run.
# make gpu-test, gpu-examples and gpu-bench run their programs with it.
#
#   sh tools/gpu-runs.sh -n NAME -d DEADLINE [-m MAX] [-g GRACE] [-e VAR] [-f LABEL]... RUN...
#
# Each RUN is one argument, "LABEL WEIGHT[:MAX] COMMAND ARGS...", split at
# spaces (no quoting: paths here have none). The runs share DEADLINE seconds
# by weight: a run gets the seconds left (less one, for the rounding of
# `date +%s`) times its weight over the weights of the runs not yet made,
# never more than its own MAX or -m's (both are the bound of the program,
# below). A run that ends early leaves its time to the ones after it, and a
# program that never ends takes its slot and no more, so the slots add up to
# the deadline whatever the programs do and the first cannot starve the
# rest. Within its slot a program gets TERM at slot - GRACE seconds (its
# bound; default GRACE 5) and KILL at the slot (`timeout -k`; timeout puts it
# in a process group of its own and signals the whole group). -e VAR exports
# VAR=<its bound in seconds> to each program, so that it can end itself with
# a report first. A run whose bound would be under a second is not run, and
# the ones after it are still looked at (a lighter one may fit).
#
# -f LABEL counts LABEL as failed before anything runs (a tool found
# missing). Exit 0 if every run passed; else 1, after a last line
#   NAME: FAILED: failed: L...; timed out: L...; stopped: L; not run: L...
# naming each run (the empty groups left out). On TERM, INT or HUP it ends
# the program in flight (TERM to its process group; its timeout then KILLs
# it after GRACE), names it as stopped and the rest as not run, prints the
# FAILED line and exits 143: so a make or a script stopped from outside ends
# what it started and still says what ran. Programs read no standard input.
set -u
name=gpu-runs deadline="" max="" grace=5 bound_var="" failed="" timedout="" stopped="" notrun=""
usage() { echo "usage: $0 -n NAME -d DEADLINE [-m MAX] [-g GRACE] [-e VAR] [-f LABEL]... 'LABEL WEIGHT[:MAX] COMMAND...'..." >&2; exit 2; }
int() { case $1 in ''|*[!0-9]*) echo "$0: $2 must be a whole number of seconds, not '$1'" >&2; exit 2;; esac; }
while getopts n:d:m:g:e:f: o; do
    case $o in
    n) name=$OPTARG ;;
    d) int "$OPTARG" "-d DEADLINE"; deadline=$OPTARG ;;
    m) int "$OPTARG" "-m MAX"; max=$OPTARG ;;
    g) int "$OPTARG" "-g GRACE"; grace=$OPTARG ;;
    e) bound_var=$OPTARG ;;
    f) failed="$failed $OPTARG" ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ -n "$deadline" ] || usage
end=$(($(date +%s) + deadline))

# Each RUN checked, and the weights summed, before any starts.
check_run() {
    set -f; set -- $1; set +f
    [ $# -ge 3 ] || { echo "$0: '$*': want LABEL WEIGHT[:MAX] COMMAND..." >&2; exit 2; }
    int "${2%%:*}" "the weight of $1"
    case $2 in *:*) int "${2#*:}" "the bound of $1";; esac
    weights=$((weights + ${2%%:*}))
    rest="$rest $1" # the labels of the runs not yet started
}
weights=0 rest=""
for run in "$@"; do check_run "$run"; done

summary() {
    line=""
    [ -n "$failed" ] && line="$line; failed:$failed"
    [ -n "$timedout" ] && line="$line; timed out:$timedout"
    [ -n "$stopped" ] && line="$line; stopped:$stopped"
    [ -n "$notrun" ] && line="$line; not run:$notrun"
    if [ -n "$line" ]; then echo "$name: FAILED: ${line#; }"; return 1; fi
    echo "$name: every run passed"
}

# Stopped from outside: the program in flight ends with us, and the runs
# not yet started are named.
pid="" label=""
on_signal() {
    trap '' TERM INT HUP
    if [ -n "$pid" ]; then
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null # its timeout KILLs the group GRACE s after the TERM
        echo "$name: $label stopped: $name itself was stopped"
        stopped=" $label"
    fi
    for l in $rest; do notrun="$notrun $l"; done
    summary
    exit 143
}
trap on_signal TERM INT HUP

# One run: its slot, then the program under timeout, in the background so
# that a signal to us is handled at once (wait returns on a trapped signal).
do_run() {
    set -f; set -- $1; set +f
    label=$1 weight=${2%%:*} cap=$max
    case $2 in *:*) cap=${2#*:};; esac
    shift 2
    rest=${rest#" $label"}
    left=$((end - $(date +%s) - 1))
    [ $left -lt 0 ] && left=0
    slot=$((weights > 0 ? left * weight / weights : left))
    weights=$((weights - weight))
    bound=$((slot - grace))
    [ -n "$cap" ] && [ $bound -gt "$cap" ] && bound=$cap
    if [ $bound -lt 1 ]; then
        echo "$name: $label not run: $left s left of the $deadline s deadline, its share too short"
        notrun="$notrun $label"
        return
    fi
    echo "== $label (at most $bound s): $*"
    if [ -n "$bound_var" ]; then
        env "$bound_var=$bound" timeout -k "$grace" "$bound" "$@" < /dev/null &
    else
        timeout -k "$grace" "$bound" "$@" < /dev/null &
    fi
    pid=$!
    wait "$pid"
    rc=$?
    pid=""
    case $rc in
    0) ;;
    124 | 137)
        echo "$name: $label timed out: stopped at its bound ($bound s)"
        timedout="$timedout $label" ;;
    *)
        echo "$name: $label failed (exit status $rc)"
        failed="$failed $label" ;;
    esac
}
for run in "$@"; do do_run "$run"; label=""; done
summary
