// The compare-and-swap reference-count baseline of the cache benchmarks
// (bench_cache.cpp on host threads, bench/cuda/bench_gpu.cu on the GPU): the
// hit path with the state word taken by a CAS loop (VALID -> VALID + 1,
// retried on any change) instead of one fetch-add - the dissertation's
// baseline, §6.2. It does the same bookkeeping as gpumem_cache_acquire's hit
// path. Returns the line's data, or NULL if the line is not resident (the
// benchmarks keep every line resident).
#ifndef GPUMEM_BENCH_CAS_BASELINE_H
#define GPUMEM_BENCH_CAS_BASELINE_H
#include "gpumem_cache.h"

GPUMEM_API void *cas_acquire(gpumem_cache *c, uint64_t line) {
    uint32_t *w = &c->lines[line].state;
    for (;;) {
        uint32_t s = gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
        if ((s & (GPUMEM_CACHE_VALID | GPUMEM_CACHE_BUSY)) != GPUMEM_CACHE_VALID) return 0;
        if (gpumem_atomic_cas_u32(w, &s, s + 1, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_DEVICE)) break;
    }
    uint32_t k = c->lines[line].slot;
    gpumem__policy_touch(c, k, line);
    gpumem__cache_count(c, line, GPUMEM__ST_HITS, 1);
    return gpumem__slot_data(c, k);
}
#endif
