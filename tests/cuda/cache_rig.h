// A gpumem cache in managed memory for the CUDA tests and benchmarks, the
// content its data starts with (initial_word) or is written with
// (written_word), and the counted, content-checked element read and write
// steps the cache and tier tests share (RigCounts, RigRun, rig_flush_wrong,
// rig_read_word, rig_own_writes).
#ifndef GPUMEM_TEST_CACHE_RIG_H
#define GPUMEM_TEST_CACHE_RIG_H
#include "gpumem_cache.h"
#include "cuda_check.h"

__host__ __device__ static inline uint64_t initial_word(uint64_t w) { return w * 0x9E3779B97F4A7C15ull ^ 0x5bd1e995ull; }
__host__ __device__ static inline uint64_t written_word(uint64_t w) { return w * 0xC2B2AE3D27D4EB4Full ^ 1; }

// A cache over `n_lines` lines of `line_bytes`, all in managed memory.
struct Rig {
    gpumem_cache *cache = nullptr;
    uint64_t *backing = nullptr;
    void *meta = nullptr, *slots_raw = nullptr, *prp_raw = nullptr, *seq_mem = nullptr;
    gpumem_policy *seq = nullptr; // a sequential policy the cache uses, or none
    uint64_t n_words = 0;
    // Backed by memory, or (nvme non-NULL) by those queue pairs.
    Rig(uint32_t line_bytes, uint64_t n_lines, uint32_t n_slots, const gpumem_cache_backing *nvme = nullptr,
        uint32_t policy = GPUMEM_POLICY_KINDS) {
        gpumem_cache_desc d = gpumem_cache_desc_default();
        if (policy < GPUMEM_POLICY_SLOT_KINDS) {
            d.policy = policy;
        } else if (policy < GPUMEM_POLICY_KINDS) { // a sequential policy, in managed memory
            gpumem_policy_desc pd = gpumem_policy_desc_default(policy, n_slots);
            CHECK(cudaMallocManaged(&seq, sizeof *seq));
            CHECK(cudaMallocManaged(&seq_mem, gpumem_policy_bytes(&pd)));
            if (gpumem_policy_init(seq, &pd, seq_mem) != GPUMEM_OK) {
                fprintf(stderr, "policy init failed\n");
                exit(1);
            }
            d.seq_policy = seq;
        } // else the cache's default
        n_words = n_lines * line_bytes / 8;
        d.n_lines = n_lines;
        d.line_bytes = line_bytes;
        d.n_slots = n_slots;
        if (nvme) {
            d.backing = *nvme;
        } else {
            CHECK(cudaMallocManaged(&backing, n_lines * line_bytes));
            for (uint64_t w = 0; w < n_words; w++) backing[w] = initial_word(w);
            d.backing = gpumem_cache_backing_memory(backing);
        }
        d.meta_bytes = gpumem_cache_meta_bytes(&d);
        CHECK(cudaMallocManaged(&meta, d.meta_bytes));
        // Slots (and PRP lists) start on a page: CUDA's allocators return
        // 512-byte aligned blocks for small sizes, and a line that started
        // inside a page would span one page more than its PRPs allow.
        CHECK(cudaMallocManaged(&slots_raw, (size_t)n_slots * line_bytes + GPUMEM_NVME_PAGE_BYTES));
        size_t prp = gpumem_cache_prp_bytes(line_bytes, n_slots, d.backing.kind);
        if (prp) {
            CHECK(cudaMallocManaged(&prp_raw, prp + GPUMEM_NVME_PAGE_BYTES));
            d.prp_lists = (uint64_t *)GPUMEM_ALIGN_UP((uintptr_t)prp_raw, GPUMEM_NVME_PAGE_BYTES);
        }
        CHECK(cudaMallocManaged(&cache, sizeof *cache));
        d.meta = meta;
        d.data = (void *)GPUMEM_ALIGN_UP((uintptr_t)slots_raw, GPUMEM_NVME_PAGE_BYTES);
        if (gpumem_cache_init(cache, &d) != GPUMEM_OK) {
            fprintf(stderr, "cache init failed\n");
            exit(1);
        }
    }
    ~Rig() {
        cudaFree(cache);
        cudaFree(slots_raw);
        cudaFree(prp_raw);
        cudaFree(meta);
        cudaFree(backing);
        cudaFree(seq);
        cudaFree(seq_mem);
    }
};

// Every element operation of a run, counted once: ok (and checked by
// content), bad content, EAGAIN answers retried, other statuses.
struct RigCounts {
    unsigned long long ok, bad, eagain, other;
};

// What a kernel over all of a Rig's words takes: an array handle (8-byte
// elements, in managed memory) and zeroed counts, freed with it.
struct RigRun {
    gpumem_cache_array *a = nullptr;
    RigCounts *n = nullptr;
    explicit RigRun(const Rig &r) {
        CHECK(cudaMallocManaged(&a, sizeof *a));
        CHECK(cudaMallocManaged(&n, sizeof *n));
        *a = gpumem_cache_array_make(r.cache, 8, 0, r.n_words);
        memset(n, 0, sizeof *n);
    }
    ~RigRun() {
        cudaFree(a);
        cudaFree(n);
    }
    RigRun(const RigRun &) = delete;
    RigRun &operator=(const RigRun &) = delete;
};

// Flushes r's cache (what: the check's name) and returns how many words of
// its backing then differ from written_word; *written: the lines written.
static inline uint64_t rig_flush_wrong(const Rig &r, uint64_t *written, const char *what) {
    uint64_t wrong = 0;
    EXPECT(gpumem_cache_flush(r.cache, written) == GPUMEM_OK, "%s", what);
    for (uint64_t w = 0; w < r.n_words; w++) wrong += r.backing[w] != written_word(w);
    return wrong;
}

#if defined(__CUDACC__)
// Read word w through r and count it, checked against initial_word. EAGAIN
// (every slot held) is retried with a sleep, bounded (DeviceRetry): past the
// bound it counts as other.
__device__ static inline void rig_read_word(gpumem_cache_ref *r, uint64_t w, RigCounts *n) {
    uint64_t v = 0;
    gpumem_status st;
    DeviceRetry retry;
    while ((st = gpumem_cache_ref_get(r, w, &v)) == GPUMEM_EAGAIN && retry.pause()) atomicAdd(&n->eagain, 1ull);
    if (st != GPUMEM_OK) atomicAdd(&n->other, 1ull);
    else atomicAdd(v == initial_word(w) ? &n->ok : &n->bad, 1ull);
}

// Thread t of `stride` writes written_word to words t, t + stride, ...,
// counting each (EAGAIN retried as in rig_read_word).
__device__ static inline void rig_own_writes(gpumem_cache_array *a, uint64_t n_words, uint64_t stride, RigCounts *n,
                                             uint64_t t) {
    gpumem::cache_array_ref<uint64_t> r(a);
    for (uint64_t w = t; w < n_words; w += stride) {
        gpumem_status st;
        DeviceRetry retry;
        while ((st = r.set(w, written_word(w))) == GPUMEM_EAGAIN && retry.pause()) atomicAdd(&n->eagain, 1ull);
        atomicAdd(st == GPUMEM_OK ? &n->ok : &n->other, 1ull);
    }
}
#endif
#endif
