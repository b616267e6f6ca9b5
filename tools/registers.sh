#!/bin/sh
# Registers per thread of each kernel in bench/registers/kernels.cu, from
# ptxas -v, as a Markdown table: tools/registers.sh NVCC ARCH OUT.md
# Compiled twice: as shipped, and with GPUMEM_NO_STATS (statistics compiled out).
set -e
nvcc=$1 arch=$2 out=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for variant in stats nostats; do
    flags=""
    [ $variant = nostats ] && flags="-DGPUMEM_NO_STATS"
    "$nvcc" -std=c++17 -arch="$arch" -I. $flags -Xptxas -v -c bench/registers/kernels.cu \
        -o "$tmp/k.o" 2> "$tmp/$variant.log" || { cat "$tmp/$variant.log"; exit 1; }
    # ptxas prints "Compiling entry function '_Z..name..'" then "Used N registers"
    awk -v v=$variant '/Compiling entry function/ { match($0, /reg_[a-z_]+/); k = substr($0, RSTART, RLENGTH) }
         /Used [0-9]+ registers/ && k != "" { for (i = 1; i <= NF; i++) if ($i == "Used") print k, v, $(i+1); k = "" }' \
        "$tmp/$variant.log" >> "$tmp/all"
done
target() { case $1 in reg_cache_read_element) echo 48;; reg_qp_read) echo 32;; *) echo "-";; esac; }
{
    echo "# Registers per thread, $arch ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'))"
    echo
    echo "Written by \`make registers\` (tools/registers.sh) from \`ptxas -v\` on bench/registers/kernels.cu:"
    echo "one kernel around each public device entry point. \"no stats\" is the same kernel built with"
    echo "GPUMEM_NO_STATS. Compiled only; no GPU needed."
    echo
    echo "| kernel | entry point | registers | no stats | target |"
    echo "|---|---|---:|---:|---:|"
    for k in reg_cache_read_element reg_cache_ref_get reg_qp_read reg_qp_read_buf reg_qp_submit reg_qp_poll reg_gpuctl_serve; do
        s=$(awk -v k=$k '$1 == k && $2 == "stats" { print $3 }' "$tmp/all")
        n=$(awk -v k=$k '$1 == k && $2 == "nostats" { print $3 }' "$tmp/all")
        case $k in
        reg_cache_read_element) e="gpumem_cache_acquire_coalesced + release_coalesced, one element";;
        reg_cache_ref_get) e="gpumem_cache_ref_get (array reference), one element";;
        reg_qp_read) e="gpumem_nvme_qp_read (blocking)";;
        reg_qp_read_buf) e="gpumem_nvme_qp_read_buf (blocking, PRPs from a buffer)";;
        reg_qp_submit) e="gpumem_nvme_qp_submit";;
        reg_qp_poll) e="gpumem_nvme_qp_poll";;
        reg_gpuctl_serve) e="gpumem_nvme_gpuctl_serve (GPU controller loop)";;
        esac
        [ -n "$s" ] || { echo "registers: no ptxas count for $k" >&2; exit 1; }
        echo "| $k | $e | $s | $n | $(target $k) |"
    done
} > "$out"
cat "$out"
