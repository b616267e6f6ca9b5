/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* share_release_ir.c - one gpumem_share_release, for counting its work
 * with callgrind: the same setup as bench/share_bench.c's "calls" section
 * (host and GPU 0 hold every one of RESIDENT lines of 4 KiB over memory,
 * the host writes every 4th line from 0, WRITTEN of them), then one
 * release by the host over the whole range, inside release_once, the only
 * function callgrind collects. Instruction counts are exact, so they show
 * whether the work grows with the resident lines where timings on a shared
 * machine cannot; --cache-sim shows the misses. Not part of make test.
 *
 *   cc -std=c11 -O2 -g -I. bench/share_release_ir.c -o build/share_release_ir -pthread
 *   for r in 1024 4096 16384; do for w in 16 256; do
 *     valgrind --tool=callgrind --cache-sim=yes --LL=2097152,16,64 \
 *       --toggle-collect='release_once*' --callgrind-out-file=build/cg.$r.$w \
 *       build/share_release_ir $r $w >/dev/null 2>&1
 *     echo "$r $w $(callgrind_annotate build/cg.$r.$w | grep -m1 'PROGRAM TOTALS')"
 *   done; done
 *
 * (--LL: the 2 MiB L2 of the machine the results were taken on; the
 * events are Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.) Results and what
 * they show: bench/results/share-bench-vm.md. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <stdio.h>
#include <stdlib.h>

#include "gpumem_share.h"

#define LINE 4096u

__attribute__((noinline)) static gpumem_status release_once(gpumem_share *s, uint32_t n_lines) {
    return gpumem_share_release(s, GPUMEM_SHARE_HOST, 0, n_lines);
}

int main(int argc, char **argv) {
    gpumem_share_desc sd = gpumem_share_desc_default(3);
    gpumem_cache *caches[3] = {0};
    gpumem_share *s;
    unsigned char *mem;
    uint32_t resident, written, l, o;
    if (argc != 3 || (resident = (uint32_t)atoi(argv[1])) == 0 || (written = (uint32_t)atoi(argv[2])) == 0 ||
        4 * (uint64_t)written > resident) {
        fprintf(stderr, "usage: share_release_ir RESIDENT WRITTEN (4 * WRITTEN <= RESIDENT)\n");
        return 2;
    }
    if (!(mem = (unsigned char *)calloc(resident, LINE))) return 1;
    sd.n_entries = 2 * resident;
    for (o = GPUMEM_SHARE_HOST; o < 3; o++) {
        gpumem_cache_desc d = gpumem_cache_desc_default();
        d.n_lines = resident;
        d.line_bytes = LINE;
        d.n_slots = resident;
        d.backing = gpumem_cache_backing_memory(mem);
        if (gpumem_cache_create(&d, &caches[o]) != GPUMEM_OK) return 1;
        sd.caches[o] = caches[o];
    }
    if (gpumem_share_create(&sd, &s) != GPUMEM_OK) return 1;
    for (l = 0; l < resident; l++)
        for (o = GPUMEM_SHARE_HOST; o < 3; o++) {
            void *p;
            if (gpumem_cache_acquire(caches[o], l, 1, 0, &p) != GPUMEM_OK) return 1;
            gpumem_cache_release(caches[o], l, 1);
        }
    for (l = 0; l < written; l++) {
        void *p;
        if (gpumem_share_get(s, GPUMEM_SHARE_HOST, 4 * l, 1, &p) != GPUMEM_OK) return 1;
        ((unsigned char *)p)[0] = 1;
        gpumem_share_put(s, GPUMEM_SHARE_HOST, 4 * l, 1);
    }
    if (release_once(s, resident) != GPUMEM_OK) return 1;
    if (gpumem_share_destroy(s) != GPUMEM_OK) return 1;
    for (o = GPUMEM_SHARE_HOST; o < 3; o++) gpumem_cache_destroy(caches[o]);
    free(mem);
    return 0;
}
