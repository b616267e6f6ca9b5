// gpumem_share.h with a GPU owner: the share and both caches in managed
// memory (gpumem_share_init), the host fetching the GPU's lines for it (the
// role of a host thread serving the GPU's miss queue: a GPU thread's own
// miss in a shared cache is refused, GPUMEM_ESTATE, until then), GPU
// threads writing through gpumem_share_get / _put, the release made from
// device code at the kernel's end (one thread, after the writers), then the
// host acquiring and reading the GPU's writes, merged on demand, and the
// flush putting them in storage. Every write and read is counted and
// checked by content.
//
//   make gpu-test        (runs where a GPU is present; compiled by make test)
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_share.h"

#include "cache_rig.h"
#include "cuda_check.h"

#define LINE 4096u
#define WORDS_PER_LINE (LINE / 8)

struct Counts {
    unsigned long long written, refused_miss, other;
};

// Block b writes line b: each thread its words, through the share (which
// tracks the write: base, pin, consistency-dirty bit).
__global__ void write_lines(gpumem_share *s, Counts *n) {
    const uint64_t line = blockIdx.x;
    void *p;
    gpumem_status st = gpumem_share_get(s, GPUMEM_SHARE_GPU0, line, 1, &p);
    if (st != GPUMEM_OK) {
        atomicAdd(&n->other, 1ull);
        return;
    }
    for (uint32_t w = threadIdx.x; w < WORDS_PER_LINE; w += blockDim.x)
        ((uint64_t *)p)[w] = written_word(line * WORDS_PER_LINE + w);
    if (gpumem_share_put(s, GPUMEM_SHARE_GPU0, line, 1) == GPUMEM_OK) atomicAdd(&n->written, 1ull);
    else atomicAdd(&n->other, 1ull);
}

// A GPU thread's miss on a line the host has not fetched: refused.
__global__ void miss_line(gpumem_cache *c, uint64_t line, Counts *n) {
    void *p;
    gpumem_status st = gpumem_cache_acquire(c, line, 1, 0, &p);
    if (st == GPUMEM_ESTATE) atomicAdd(&n->refused_miss, 1ull);
    else if (st == GPUMEM_OK) gpumem_cache_release(c, line, 1), atomicAdd(&n->other, 1ull);
    else atomicAdd(&n->other, 1ull);
}

// The kernel boundary, on the device: one thread, after every writer.
__global__ void release_on_device(gpumem_share *s, uint64_t n_lines, gpumem_status *st) {
    *st = gpumem_share_release(s, GPUMEM_SHARE_GPU0, 0, n_lines);
}

static void test_gpu_writes_seen_by_host(bool small) {
    test_begin();
    const uint64_t n_lines = small ? 16 : 128, written = n_lines / 2;
    Rig host(LINE, n_lines, (uint32_t)n_lines);
    gpumem_cache_backing same = gpumem_cache_backing_memory(host.backing);
    Rig gpu(LINE, n_lines, (uint32_t)n_lines, &same);
    gpumem_share_desc d = gpumem_share_desc_default(3);
    d.caches[GPUMEM_SHARE_HOST] = host.cache;
    d.caches[GPUMEM_SHARE_GPU0] = gpu.cache;
    size_t bytes = gpumem_share_bytes(&d);
    void *mem;
    gpumem_share *s;
    Counts *n;
    gpumem_status *dev_st;
    CHECK(cudaMallocManaged(&mem, bytes));
    CHECK(cudaMallocManaged(&n, sizeof *n));
    CHECK(cudaMallocManaged(&dev_st, sizeof *dev_st));
    memset(n, 0, sizeof *n);
    EXPECT(gpumem_share_init(&d, mem, bytes, &s) == GPUMEM_OK, "share init");
    // The host serves the GPU's misses: the first half of the lines.
    EXPECT(gpumem_share_fetch(s, GPUMEM_SHARE_GPU0, 0, written) == GPUMEM_OK, "fetch for the GPU");
    write_lines<<<(uint32_t)written, 128>>>(s, n);
    CHECK(cudaGetLastError());
    miss_line<<<1, 1>>>(gpu.cache, n_lines - 1, n);
    CHECK(cudaGetLastError());
    release_on_device<<<1, 1>>>(s, n_lines, dev_st);
    CHECK(cudaGetLastError());
    wait_kernels(kTestWaitS, "GPU writes through the share, a refused miss, the release");
    EXPECT(n->written == written && n->other == 0, "%llu lines written, %llu other statuses", n->written, n->other);
    EXPECT(n->refused_miss == 1, "a GPU miss in a shared cache: refused %llu", n->refused_miss);
    EXPECT(*dev_st == GPUMEM_OK, "release on the device: %s", gpumem_status_str(*dev_st));
    // The host acquires and reads: the GPU's writes, merged on demand.
    EXPECT(gpumem_share_acquire(s, GPUMEM_SHARE_HOST, 0, n_lines) == GPUMEM_OK, "host acquire");
    uint64_t bad = 0;
    for (uint64_t l = 0; l < n_lines; l++) {
        void *p;
        if (gpumem_share_get(s, GPUMEM_SHARE_HOST, l, 0, &p) != GPUMEM_OK) {
            bad++;
            continue;
        }
        for (uint64_t w = 0; w < WORDS_PER_LINE; w++) {
            uint64_t i = l * WORDS_PER_LINE + w;
            bad += ((uint64_t *)p)[w] != (l < written ? written_word(i) : initial_word(i));
        }
        gpumem_share_put(s, GPUMEM_SHARE_HOST, l, 0);
    }
    EXPECT(bad == 0, "%llu words wrong on the host", (unsigned long long)bad);
    EXPECT(gpumem_share_flush(s, GPUMEM_SHARE_GPU0) == GPUMEM_OK, "flush the GPU owner");
    bad = 0;
    for (uint64_t i = 0; i < written * WORDS_PER_LINE; i++) bad += host.backing[i] != written_word(i);
    EXPECT(bad == 0, "%llu words wrong in storage after the flush", (unsigned long long)bad);
    gpumem_share_stats st;
    gpumem_share_get_stats(s, &st);
    EXPECT(st.violations == 0 && st.on_demand_merges == written, "violations %llu, on-demand merges %llu",
           (unsigned long long)st.violations, (unsigned long long)st.on_demand_merges);
    EXPECT(gpumem_share_destroy(s) == GPUMEM_OK, "destroy");
    char detail[120];
    snprintf(detail, sizeof detail, "%llu lines written on the GPU, read on the host", (unsigned long long)written);
    test_end("GPU owner's writes seen by the host after release and acquire", detail);
    cudaFree(mem);
    cudaFree(n);
    cudaFree(dev_st);
}

int main(int argc, char **argv) {
    bool small = parse_args(argc, argv, false).small;
    if (no_gpu("test_share_gpu")) return 0;
    test_gpu_writes_seen_by_host(small);
    return tests_failed ? 1 : 0;
}
