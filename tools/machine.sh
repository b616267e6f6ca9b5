#!/bin/sh
# SPDX-License-Identifier: MIT
# machine.sh: one line naming the machine a result was measured on (CPU
# model, cores, GPU), written into every result file so a copied or renamed
# file still says where it came from. No commas: Google Benchmark's
# --benchmark_context splits its value at them.
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "${cpu:-unknown CPU}; $(nproc 2>/dev/null || echo '?') cores; GPU: ${gpu:-none}; host $(hostname -s 2>/dev/null || echo '?')" | tr ',' ' '
