#!/bin/sh
# Registers per thread of each kernel in bench/registers/kernels.cu, from
# ptxas -v, as a Markdown table: tools/registers.sh NVCC ARCH OUT.md
# Compiled three times: as shipped, with GPUMEM_NO_STATS (statistics compiled
# out) and with GPUMEM_CACHE_TIER=0 (the host tier's hooks compiled out);
# ptxas's stack frame and spill figures of the shipped build go with them.
set -e
nvcc=$1 arch=$2 out=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for variant in stats nostats notier; do
    flags=""
    [ $variant = nostats ] && flags="-DGPUMEM_NO_STATS"
    [ $variant = notier ] && flags="-DGPUMEM_CACHE_TIER=0"
    "$nvcc" -std=c++17 -arch="$arch" -I. $flags -Xptxas -v -c bench/registers/kernels.cu \
        -o "$tmp/k.o" 2> "$tmp/$variant.log" || { cat "$tmp/$variant.log"; exit 1; }
    # ptxas prints "Compiling entry function '_Z..name..'", then "N bytes stack
    # frame, N bytes spill stores, N bytes spill loads", then "Used N registers"
    awk -v v=$variant '/Compiling entry function/ { match($0, /reg_[a-z_]+/); k = substr($0, RSTART, RLENGTH); f = "" }
         /bytes stack frame/ && k != "" { f = $1 " " $5 " " $9 }
         /Used [0-9]+ registers/ && k != "" { for (i = 1; i <= NF; i++) if ($i == "Used") print k, v, $(i+1), f; k = "" }' \
        "$tmp/$variant.log" >> "$tmp/all"
done
target() { case $1 in reg_cache_read_element) echo 48;; reg_qp_read) echo 32;; *) echo "-";; esac; }
kernels="reg_cache_read_element reg_cache_hint_read reg_cache_ref_get reg_qp_read reg_qp_read_buf reg_qp_submit reg_qp_poll reg_gpuctl_serve
 reg_share_write reg_share_release reg_share_acquire"
over=0
{
    echo "# Registers per thread, $arch ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'))"
    echo
    echo "Written by \`make registers\` (tools/registers.sh) from \`ptxas -v\` on bench/registers/kernels.cu:"
    echo "one kernel around each public device entry point. \"no stats\" is the same kernel built with"
    echo "GPUMEM_NO_STATS, \"no tier\" with GPUMEM_CACHE_TIER=0 (the host tier's hooks compiled out)."
    echo "Stack frame and spills (bytes, from ptxas) are the shipped build's: the frame holds locals kept in"
    echo "memory on purpose (the cache's miss record and tier-copy record, a blocking command held through its"
    echo "waits); spills are values that did not fit in registers. Compiled only; no GPU needed."
    echo
    echo "| kernel | entry point | registers | no stats | no tier | target | stack frame | spill stores / loads |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
    for k in $kernels; do
        s=$(awk -v k=$k '$1 == k && $2 == "stats" { print $3 }' "$tmp/all")
        n=$(awk -v k=$k '$1 == k && $2 == "nostats" { print $3 }' "$tmp/all")
        t=$(awk -v k=$k '$1 == k && $2 == "notier" { print $3 }' "$tmp/all")
        frame=$(awk -v k=$k '$1 == k && $2 == "stats" { print $4 }' "$tmp/all")
        spills=$(awk -v k=$k '$1 == k && $2 == "stats" { print $5 " / " $6 }' "$tmp/all")
        case $k in
        reg_cache_read_element) e="gpumem_cache_acquire_coalesced + release_coalesced, one element";;
        reg_cache_hint_read) e="gpumem_cache_hint_coalesced, then the same element read";;
        reg_cache_ref_get) e="gpumem_cache_ref_get (array reference), one element";;
        reg_qp_read) e="gpumem_nvme_qp_read (blocking)";;
        reg_qp_read_buf) e="gpumem_nvme_qp_read_buf (blocking, PRPs from a buffer)";;
        reg_qp_submit) e="gpumem_nvme_qp_submit";;
        reg_qp_poll) e="gpumem_nvme_qp_poll";;
        reg_gpuctl_serve) e="gpumem_swctl_gpu_serve (GPU controller loop)";;
        reg_share_write) e="gpumem_share_get to write + put (a miss posted to the host's server)";;
        reg_share_release) e="gpumem_share_release on the device (its host part posted)";;
        reg_share_acquire) e="gpumem_share_acquire on the device";;
        esac
        [ -n "$s" ] || { echo "registers: no ptxas count for $k" >&2; exit 1; }
        want=$(target $k)
        echo "| $k | $e | $s | $n | $t | $want | $frame | $spills |"
        # A kernel over its target fails the run (make test runs this): a
        # register target is a design limit (docs/gpu.md), and ptxas's
        # count is exact.
        if [ "$want" != "-" ] && [ "$s" -gt "$want" ]; then
            echo "registers: $k uses $s registers, over its target of $want" >&2
            over=1
        fi
    done
} > "$out"
cat "$out"
# No table is left behind for make to find current next time.
[ $over = 0 ] || rm -f "$out"
exit $over
