// GPU threads through three tiers: the gpumem cache in managed memory (GPU
// tier), a host tier whose slots are pinned host memory mapped into the GPU
// (gpumem_tier.h, placed with gpumem_tier_init: its metadata in managed
// memory), and memory behind both (storage). Under tier order and under
// GMT-Reuse (a model set from the host, so the predictor's lock and
// placement run on the GPU):
//   1. random reads through the array reference by 64K threads: every word
//      checked; misses served from the host tier are copied by the coalesced
//      group (the warp copy), so host hits must be seen;
//   2. writes of every word through gpumem::cache_array_ref (lines moved to
//      the host tier dirty), then the host flushes both tiers and compares
//      the backing with the expected values;
//   3. the structure after each: no line in both tiers, nothing busy.
// Each test prints one PASS/FAIL line; the exit status is non-zero if any failed.
//
//   build/cuda/test_tier_gpu.bin [--small]   (--small: less data, fewer threads)
//   make gpu-test        (runs where a GPU is present; compiled by make test)
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPUMEM_CACHE_CHECK 1
#define GPUMEM_IMPLEMENTATION
#include "gpumem_tier.h"

#include "cuda_check.h"
#include "cache_rig.h"

// A host tier of n_slots lines below the rig's cache.
struct TierRig {
    gpumem_tier *tier = nullptr;
    void *meta = nullptr, *data_raw = nullptr;
    TierRig(gpumem_cache *c, uint32_t n_slots, uint32_t placement) {
        gpumem_tier_desc d = gpumem_tier_desc_default(c, n_slots);
        d.placement = placement;
        d.train_accesses = GPUMEM_TIER_NO_TRAINING; // the model is set from the host
        d.meta_bytes = gpumem_tier_meta_bytes(&d);
        CHECK(cudaMallocManaged(&meta, d.meta_bytes));
        // Host slots: pinned, mapped (unified addressing: the host pointer
        // is valid on the GPU), page aligned.
        CHECK(cudaHostAlloc(&data_raw, (size_t)n_slots * c->line_bytes + GPUMEM_NVME_PAGE_BYTES,
                            cudaHostAllocMapped));
        CHECK(cudaMallocManaged(&tier, sizeof *tier));
        d.meta = meta;
        d.data = (void *)GPUMEM_ALIGN_UP((uintptr_t)data_raw, GPUMEM_NVME_PAGE_BYTES);
        if (gpumem_tier_init(tier, &d) != GPUMEM_OK) {
            fprintf(stderr, "tier init failed\n");
            exit(1);
        }
        // GMT-Reuse: a model that puts a reuse of the cache's size or more
        // in the host tier, so it is used from the first eviction.
        if (placement == GPUMEM_TIER_GMT_REUSE && gpumem_tier_set_model(tier, 1.0, 0.0) != GPUMEM_OK) exit(1);
    }
    ~TierRig() {
        if (gpumem_tier_detach(tier) != GPUMEM_OK) fprintf(stderr, "tier detach failed\n");
        cudaFree(tier);
        cudaFreeHost(data_raw);
        cudaFree(meta);
    }
};

__global__ void random_reads(gpumem_cache_array *a, uint64_t n_words, uint32_t per_thread, RigCounts *n) {
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    uint64_t rng = (t / 32 + 1) * 0x9E3779B97F4A7C15ull; // one sequence per warp
    gpumem_cache_ref r = gpumem_cache_ref_make(a);
    for (uint32_t k = 0; k < per_thread; k++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        // The 32 lanes of a warp read 32 consecutive words: one line, one
        // group, so a host hit is copied by the whole warp.
        rig_read_word(&r, (rng % (n_words / 32)) * 32 + (threadIdx.x & 31u), n);
    }
    if (gpumem_cache_ref_drop(&r) != GPUMEM_OK) atomicAdd(&n->other, 1ull);
}

__global__ void own_writes(gpumem_cache_array *a, uint64_t n_words, uint32_t stride, RigCounts *n) {
    rig_own_writes(a, n_words, stride, n, blockIdx.x * (uint64_t)blockDim.x + threadIdx.x);
}

static void test_tier(uint32_t placement, bool small) {
    test_begin();
    // 8 MiB of data in 4 KiB lines: 64 lines in GPU memory, 512 in host
    // memory (--small: 1 MiB, 16 and 64 lines: still three tiers that overflow).
    Rig r(4096, small ? 256 : 2048, small ? 16 : 64);
    TierRig tr(r.cache, small ? 64 : 512, placement);
    const uint32_t threads = small ? 2048 : 65536, per = 8;
    RigRun run(r);
    RigCounts *n = run.n;
    random_reads<<<threads / 256, 256>>>(run.a, r.n_words, per, n);
    wait_launched("three tiers: reads");
    gpumem_tier_stats ts;
    gpumem_tier_get_stats(tr.tier, &ts);
    EXPECT(n->ok == (unsigned long long)threads * per && n->bad == 0 && n->other == 0, "reads: ok %llu bad %llu other %llu",
           n->ok, n->bad, n->other);
    EXPECT(ts.host_hits > 0 && ts.moves > 0, "host tier unused: %llu hits, %llu moves",
           (unsigned long long)ts.host_hits, (unsigned long long)ts.moves);
    EXPECT(gpumem_tier_check_quiescent(tr.tier) == 0, "structure after the reads");
    unsigned long long read_hits = ts.host_hits;
    memset(n, 0, sizeof *n);
    own_writes<<<threads / 256, 256>>>(run.a, r.n_words, threads, n);
    wait_launched("three tiers: writes");
    uint64_t written = 0, wrong = rig_flush_wrong(r, &written, "flush of both tiers");
    gpumem_cache_stats cs;
    gpumem_cache_get_stats(r.cache, &cs);
    gpumem_tier_get_stats(tr.tier, &ts);
    EXPECT(n->ok == r.n_words && n->other == 0, "writes: ok %llu other %llu", n->ok, n->other);
    EXPECT(wrong == 0, "%llu words differ in the backing after the flush", (unsigned long long)wrong);
    EXPECT(ts.dirty_moves > 0, "no dirty line went to the host tier");
    EXPECT(ts.violations == 0 && cs.violations == 0, "violations: tier %llu cache %llu",
           (unsigned long long)ts.violations, (unsigned long long)cs.violations);
    EXPECT(ts.moves + ts.bypasses == cs.evictions, "moves %llu + bypasses %llu != evictions %llu",
           (unsigned long long)ts.moves, (unsigned long long)ts.bypasses, (unsigned long long)cs.evictions);
    EXPECT(gpumem_tier_check_quiescent(tr.tier) == 0, "structure after the writes");
    char detail[200];
    snprintf(detail, sizeof detail, "%s: %u threads, %llu host hits in reads, %llu moves (%llu dirty), %llu storage reads",
             gpumem_tier_placement_name(placement), threads, read_hits, (unsigned long long)ts.moves,
             (unsigned long long)ts.dirty_moves, (unsigned long long)cs.reads);
    test_end("three tiers: reads, writes, flush", detail);
}

int main(int argc, char **argv) {
    bool small = parse_args(argc, argv, false).small;
    if (no_gpu("test_tier_gpu")) return 0;
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    test_tier(GPUMEM_TIER_ORDER, small);
    test_tier(GPUMEM_TIER_GMT_REUSE, small);
    printf("test_tier_gpu: %s\n", tests_failed ? "FAILED" : "all passed");
    return tests_failed ? 1 : 0;
}
