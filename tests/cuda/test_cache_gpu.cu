// GPU threads through gpumem's software cache, backed by memory. The cache's
// metadata, slots and backing are managed memory, initialised on the host.
//   1. warp grouping: lanes naming the same line (and cache) form one group
//      with the lowest lane as leader; checked against the expected masks.
//   2. coalesced reads: every thread reads its element through
//      acquire_coalesced, checked by content; the hit+miss count equals the
//      thread count, and each line is filled exactly once (cache > data).
//   3. eviction under contention: a cache of 64 slots, 64K threads reading
//      random lines through the array reference, every word checked; once
//      under each policy of gpumem_policy.h (the slot policies directly, the
//      others as sequential policies behind the cache's lock).
//   4. writes and flush: threads write their own elements through
//      gpumem::cache_array_ref (a cache smaller than the data, so lines are
//      evicted and written back), then the host flushes and compares the
//      backing with the expected values.
//   5. warm hits: a second pass over a cache that holds everything is all
//      hits, no fills.
//   6. the cache in front of NVMe queue pairs served by the GPU-resident
//      controller (in managed memory): random reads with eviction, then writes of every word,
//      a flush from a GPU thread, and the namespace checked by content; the
//      controller's command counts must equal the cache's I/O counts.
// Each test prints one PASS/FAIL line; the exit status is non-zero if any failed.
//
//   build/cuda/test_cache_gpu.bin [--small] [--fused]
//     --small  every test smaller (for compute-sanitizer)
//     --fused  test 6 runs the controller in block 0 of a cooperative launch
//   make gpu-test        (runs where a GPU is present; compiled by make test)
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPUMEM_CACHE_CHECK 1
#define GPUMEM_IMPLEMENTATION
#include "gpumem_cache.h"
#include "gpumem_swctl.h"

#include "cuda_check.h"
#include "cache_rig.h"
#include "watch.h"
#include "gpuctl_run.h"

// --small (compute-sanitizer runs kernels about 100x slower): every test
// shrinks, the threads and the data, keeping what it checks (evictions
// still happen: the caches stay smaller than the data).
static bool small_run = false;
static uint32_t scaled(uint32_t full, uint32_t small) { return small_run ? small : full; }


// ---- 1. warp grouping ------------------------------------------------------

__global__ void grouping(gpumem_cache *a, gpumem_cache *b, uint32_t *mask, int *leader) {
    uint32_t lane = threadIdx.x & 31u;
    // lanes 0-7 line 5 of a, 8-15 line 5 of b, 16-31 line (lane & 1) of a;
    // lanes 28-31 sit out (inactive)
    if (lane >= 28) return;
    gpumem_cache *c = lane >= 8 && lane < 16 ? b : a;
    uint64_t line = lane < 16 ? 5 : (lane & 1);
    // The groups are formed among the lanes active together (__activemask).
    // The barrier makes it likely that all 28 are, but CUDA does not promise
    // that they stay converged after it, so the test checks only what holds
    // however the lanes arrive (test_grouping).
    __syncwarp(0x0FFFFFFFu);
    gpumem_warp_group g = gpumem_warp_group_of(c, line, 0);
    mask[threadIdx.x] = g.mask;
    leader[threadIdx.x] = g.leader;
}

// Each lane's group is a subset of the lanes on its cache and line (those
// that arrived with it) and holds the lane itself; the lanes of a group agree
// on it; its leader is its lowest lane. How many lanes found their whole set
// is reported, not checked.
static void test_grouping() {
    test_begin();
    Rig a(512, 64, 8), b(512, 64, 8);
    uint32_t *mask;
    int *leader;
    CHECK(cudaMallocManaged(&mask, 32 * sizeof *mask));
    CHECK(cudaMallocManaged(&leader, 32 * sizeof *leader));
    grouping<<<1, 32>>>(a.cache, b.cache, mask, leader);
    CHECK(cudaGetLastError());
    wait_kernels(60, "warp grouping");
    uint32_t whole = 0;
    for (uint32_t l = 0; l < 28; l++) {
        uint32_t want = l < 8 ? 0x000000FFu : l < 16 ? 0x0000FF00u : (l & 1) ? 0x0AAA0000u : 0x05550000u;
        EXPECT((mask[l] >> l & 1u) && (mask[l] & ~want) == 0, "lane %u: group %08x, not a subset of %08x holding it",
               l, mask[l], want);
        for (uint32_t m = 0; m < 28; m++)
            if (mask[l] >> m & 1u)
                EXPECT(mask[m] == mask[l], "lanes %u and %u share a group and disagree: %08x, %08x", l, m, mask[l],
                       mask[m]);
        EXPECT(mask[l] != 0 && leader[l] == __builtin_ctz(mask[l]), "lane %u: leader %d of group %08x", l, leader[l],
               mask[l]);
        whole += mask[l] == want;
    }
    cudaFree(mask);
    cudaFree(leader);
    char detail[96];
    snprintf(detail, sizeof detail, "28 lanes, 3 cache/line groups; %u lanes found their whole group", whole);
    test_end("warp grouping", detail);
}

// ---- 2. coalesced reads ----------------------------------------------------

__global__ void coalesced_reads(gpumem_cache *c, uint64_t n_words, RigCounts *n) {
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    if (t >= n_words) return;
    uint64_t line = t * 8 >> c->line_shift;
    void *p = nullptr;
    gpumem_status st = gpumem_cache_acquire_coalesced(c, line, 0, &p);
    if (st != GPUMEM_OK) {
        atomicAdd(st == GPUMEM_EAGAIN ? &n->eagain : &n->other, 1ull);
        return;
    }
    uint64_t v = ((const uint64_t *)p)[t % (c->line_bytes / 8)];
    atomicAdd(v == initial_word(t) ? &n->ok : &n->bad, 1ull);
    if (gpumem_cache_release_coalesced(c, line) != GPUMEM_OK) atomicAdd(&n->other, 1ull);
}

static void test_coalesced_reads() {
    test_begin();
    const uint32_t line = 4096;
    const uint64_t n_lines = scaled(1024, 32); // 512K threads, or 16K
    Rig r(line, n_lines, n_lines);  // room for everything: each line filled once
    RigCounts *n;
    CHECK(cudaMallocManaged(&n, sizeof *n));
    memset(n, 0, sizeof *n);
    coalesced_reads<<<(unsigned)((r.n_words + 255) / 256), 256>>>(r.cache, r.n_words, n);
    wait_launched("coalesced misses");
    gpumem_cache_stats s;
    gpumem_cache_get_stats(r.cache, &s);
    EXPECT(n->ok == r.n_words && n->bad == 0 && n->eagain == 0 && n->other == 0,
           "ok %llu bad %llu eagain %llu other %llu of %llu", n->ok, n->bad, n->eagain, n->other,
           (unsigned long long)r.n_words);
    EXPECT(s.hits + s.misses == r.n_words, "hits %llu + misses %llu", (unsigned long long)s.hits,
           (unsigned long long)s.misses);
    EXPECT(s.fills == n_lines && s.reads == n_lines, "fills %llu reads %llu for %llu lines",
           (unsigned long long)s.fills, (unsigned long long)s.reads, (unsigned long long)n_lines);
    EXPECT(s.violations == 0 && gpumem_cache_check_quiescent(r.cache) == 0, "invariants");
    char detail[160];
    snprintf(detail, sizeof detail, "%llu threads, %llu lines, %llu fills", (unsigned long long)r.n_words,
             (unsigned long long)n_lines, (unsigned long long)s.fills);
    test_end("coalesced misses (one fill per line)", detail);

    // 5. The same pass again: the cache holds every line, so all hits.
    test_begin();
    memset(n, 0, sizeof *n);
    coalesced_reads<<<(unsigned)((r.n_words + 255) / 256), 256>>>(r.cache, r.n_words, n);
    wait_launched("warm hits");
    gpumem_cache_stats s2;
    gpumem_cache_get_stats(r.cache, &s2);
    EXPECT(n->ok == r.n_words && n->bad == 0 && n->eagain == 0 && n->other == 0, "second pass: ok %llu bad %llu",
           n->ok, n->bad);
    EXPECT(s2.hits - s.hits == r.n_words && s2.misses == s.misses && s2.fills == s.fills,
           "second pass: %llu hits, %llu new misses, %llu new fills", (unsigned long long)(s2.hits - s.hits),
           (unsigned long long)(s2.misses - s.misses), (unsigned long long)(s2.fills - s.fills));
    snprintf(detail, sizeof detail, "%llu hits, 0 fills", (unsigned long long)(s2.hits - s.hits));
    test_end("warm hits", detail);
    cudaFree(n);
}

// ---- 3. eviction under contention, through the array reference ------------

// Thread t's reads: `per_thread` random words, each checked by content
// (rig_read_word).
__device__ void random_reads_of(gpumem_cache_array *a, uint64_t n_words, uint32_t per_thread, RigCounts *n,
                                uint64_t t) {
    uint64_t rng = (t + 1) * 0x9E3779B97F4A7C15ull;
    gpumem_cache_ref r = gpumem_cache_ref_make(a);
    for (uint32_t k = 0; k < per_thread; k++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        rig_read_word(&r, rng % n_words, n);
    }
    if (gpumem_cache_ref_drop(&r) != GPUMEM_OK) atomicAdd(&n->other, 1ull);
}

__global__ void random_reads(gpumem_cache_array *a, uint64_t n_words, uint32_t per_thread, RigCounts *n) {
    random_reads_of(a, n_words, per_thread, n, blockIdx.x * (uint64_t)blockDim.x + threadIdx.x);
}

static void test_eviction(uint32_t policy) {
    test_begin();
    Rig r(512, scaled(16384, 1024), 64, nullptr, policy);
    // A sequential policy (LRU, LFU, ...) runs every miss under the cache's
    // one lock, and with 64 slots for 16K lines nearly every read misses:
    // 65,536 threads would queue ~500K misses on one spin lock, minutes on
    // a GPU. 4,096 threads (128 warps) still contend for it.
    const bool one_lock = policy >= GPUMEM_POLICY_SLOT_KINDS;
    const uint32_t threads = one_lock ? scaled(4096, 1024) : scaled(65536, 1024), per = 8;
    RigRun run(r);
    RigCounts *n = run.n;
    random_reads<<<threads / 256, 256>>>(run.a, r.n_words, per, n);
    wait_launched("eviction under contention");
    gpumem_cache_stats s;
    gpumem_cache_get_stats(r.cache, &s);
    EXPECT(n->ok == (unsigned long long)threads * per && n->bad == 0 && n->other == 0,
           "ok %llu bad %llu other %llu", n->ok, n->bad, n->other);
    EXPECT(s.evictions > 0 && s.violations == 0, "evictions %llu violations %llu", (unsigned long long)s.evictions,
           (unsigned long long)s.violations);
    EXPECT(gpumem_cache_check_quiescent(r.cache) == 0, "structure after the run");
    char detail[160];
    snprintf(detail, sizeof detail, "%s: %u threads x %u reads, %llu fills, %llu evictions, %llu EAGAIN retries",
             gpumem_policy_name(policy), threads, per, (unsigned long long)s.fills, (unsigned long long)s.evictions,
             n->eagain);
    test_end("eviction under contention (array reference)", detail);
}

// ---- 4. writes through cache_array_ref, then flush --------------------------

__global__ void own_writes(gpumem_cache_array *a, uint64_t n_words, uint32_t stride, RigCounts *n) {
    rig_own_writes(a, n_words, stride, n, blockIdx.x * (uint64_t)blockDim.x + threadIdx.x);
}

static void test_writes_flush() {
    test_begin();
    Rig r(4096, scaled(2048, 128), scaled(256, 16));  // 8 MiB of data, 1 MiB of cache (or 1/16 of each)
    const uint32_t threads = scaled(32768, 2048);
    RigRun run(r);
    RigCounts *n = run.n;
    own_writes<<<threads / 256, 256>>>(run.a, r.n_words, threads, n);
    wait_launched("writes and flush");
    uint64_t written = 0, wrong = rig_flush_wrong(r, &written, "flush");
    gpumem_cache_stats s;
    gpumem_cache_get_stats(r.cache, &s);
    EXPECT(n->ok == r.n_words && n->other == 0, "writes ok %llu other %llu", n->ok, n->other);
    EXPECT(wrong == 0, "%llu words differ in the backing", (unsigned long long)wrong);
    EXPECT(s.violations == 0 && gpumem_cache_check_quiescent(r.cache) == 0, "invariants");
    char detail[160];
    snprintf(detail, sizeof detail, "%llu words, %llu write-backs (%llu at flush)", (unsigned long long)r.n_words,
             (unsigned long long)s.writebacks, (unsigned long long)written);
    test_end("writes and flush (cache_array_ref)", detail);
}

// ---- 6. the cache in front of the GPU-resident controller --------------------

__global__ void flush_on_gpu(gpumem_cache *c, gpumem_status *st, uint64_t *written) { *st = gpumem_cache_flush(c, written); }

__global__ void fill_words(uint64_t *ns, uint64_t n_words) {
    for (uint64_t w = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; w < n_words; w += (uint64_t)gridDim.x * blockDim.x)
        ns[w] = initial_word(w);
}

// The three steps of test 6 as phases of a fused launch (gpuctl_run.h):
// every worker's reads, then its writes, then one flush.
struct CacheClients {
    static constexpr uint32_t kPhases = 3;
    gpumem_cache_array *a;
    gpumem_cache *cache;
    uint64_t n_words;
    uint32_t threads, per;
    RigCounts *reads, *writes;
    gpumem_status *flush_status;
    uint64_t *written;
    __device__ void run(uint32_t phase, uint32_t worker, uint32_t workers) const {
        for (uint32_t t = worker; phase < 2 && t < threads; t += workers) {
            if (phase == 0) random_reads_of(a, n_words, per, reads, t);
            else rig_own_writes(a, n_words, threads, writes, t);
        }
        if (phase == 2 && worker == 0) *flush_status = gpumem_cache_flush(cache, written);
    }
};

static void test_over_gpu_controller(bool fused) {
    test_begin();
    const uint32_t line = 4096, n_lines = scaled(2048, 256), slots = scaled(256, 32), pairs = 4;
    const uint64_t data_bytes = (uint64_t)line * n_lines;
    gpumem_swctl_gpu_desc d = gpumem_swctl_gpu_desc_default();
    uint32_t *control;
    uint64_t *ns;
    void *mem;
    gpumem_nvme_qp **pair_list;
    CHECK(cudaHostAlloc((void **)&control, 2 * sizeof *control, cudaHostAllocMapped));
    CHECK(cudaMalloc((void **)&ns, data_bytes));
    fill_words<<<256, 256>>>(ns, data_bytes / 8);
    CHECK(cudaGetLastError());
    d.n_pairs = pairs;
    d.depth = 256;
    d.n_cids = 256;
    d.lba_bytes = 512;
    d.n_blocks = data_bytes / 512;
    d.max_blocks = line / 512;
    d.ram = ns;
    d.control = control;
    // The controller and its pairs in managed memory, initialised on the
    // host: gpumem_cache_init reads each pair's namespace from the host.
    size_t bytes = gpumem_swctl_gpu_bytes(&d);
    CHECK(cudaMallocManaged(&mem, bytes));
    gpumem_status init = gpumem_swctl_gpu_init(mem, bytes, &d);
    EXPECT(init == GPUMEM_OK, "controller init: %s", gpumem_status_str(init));
    CHECK(cudaMallocManaged(&pair_list, pairs * sizeof *pair_list));
    for (uint32_t i = 0; i < pairs; i++) pair_list[i] = gpumem_swctl_gpu_pair(mem, i);
    gpumem_nvme_ns served;
    gpumem_status got_ns = gpumem_swctl_gpu_ns(&d, &served);
    EXPECT(got_ns == GPUMEM_OK, "controller namespace: %s", gpumem_status_str(got_ns));
    gpumem_cache_backing b = gpumem_cache_backing_nvme(pair_list, 1, pairs, &served, 0, GPUMEM_CACHE_STRIPE);
    Rig r(line, n_lines, slots, &b);
    gpumem_cache_array *a;
    RigCounts *reads, *writes;
    gpumem_status *fst;
    uint64_t *written;
    CHECK(cudaMallocManaged(&a, sizeof *a));
    CHECK(cudaMallocManaged(&reads, sizeof *reads));
    CHECK(cudaMallocManaged(&writes, sizeof *writes));
    CHECK(cudaMallocManaged(&fst, sizeof *fst));
    CHECK(cudaMallocManaged(&written, sizeof *written));
    *a = gpumem_cache_array_make(r.cache, 8, 0, r.n_words);
    memset(reads, 0, sizeof *reads);
    memset(writes, 0, sizeof *writes);
    *fst = GPUMEM_ESTATE; // until a flush says otherwise
    cudaStream_t ctl_stream, work;
    CHECK(cudaStreamCreateWithFlags(&ctl_stream, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&work, cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize()); // the last time nothing persistent runs
    const uint32_t threads = scaled(65536, 2048), per = 8;
    const char *what = "cache over the GPU controller";
    bool ran = false;
    gpumem_swctl_gpu *ctl = (gpumem_swctl_gpu *)mem;
    if (init != GPUMEM_OK) {
        // nothing to run
    } else if (fused) {
        GpuctlWatch watch(ctl, &d, what, 20000);
        CacheClients clients{a, r.cache, r.n_words, threads, per, reads, writes, fst, written};
        ran = run_fused(ctl, clients, threads, work, kTestWaitS, what);
    } else {
        // The kernels launched while it runs are loaded first (lazy loading).
        const void *kernels[] = {(const void *)random_reads, (const void *)own_writes, (const void *)flush_on_gpu};
        ran = start_gpuctl(ctl, &d, 64, ctl_stream, kernels, 3, what) == GPUMEM_OK;
        if (ran) {
            {
                GpuctlWatch watch(ctl, &d, what, 20000);
                random_reads<<<threads / 256, 256, 0, work>>>(a, r.n_words, per, reads);
                CHECK(cudaGetLastError());
                wait_stream(work, kTestWaitS, "cache over the GPU controller: reads");
                own_writes<<<threads / 256, 256, 0, work>>>(a, r.n_words, threads, writes);
                CHECK(cudaGetLastError());
                flush_on_gpu<<<1, 1, 0, work>>>(r.cache, fst, written);
                CHECK(cudaGetLastError());
                wait_stream(work, kTestWaitS, "cache over the GPU controller: writes and flush");
            }
            stop_gpuctl(&d, ctl_stream, 30);
        }
    }
    EXPECT(ran, "the controller and its clients ran");
    EXPECT(reads->ok == (unsigned long long)threads * per && reads->bad == 0 && reads->other == 0,
           "reads: ok %llu bad %llu other %llu", reads->ok, reads->bad, reads->other);
    EXPECT(*fst == GPUMEM_OK, "flush on the GPU: %s", gpumem_status_str(*fst));
    EXPECT(writes->ok == r.n_words && writes->other == 0, "writes ok %llu other %llu", writes->ok, writes->other);
    gpumem_target_stats cs;
    gpumem_cache_stats s;
    EXPECT(gpumem_swctl_gpu_get_stats_cuda(ctl, &cs) == GPUMEM_OK, "controller stats");
    gpumem_cache_get_stats(r.cache, &s);
    uint64_t *host = (uint64_t *)malloc(data_bytes), wrong = 0;
    CHECK(cudaMemcpy(host, ns, data_bytes, cudaMemcpyDeviceToHost));
    for (uint64_t w = 0; w < r.n_words; w++) wrong += host[w] != written_word(w);
    EXPECT(wrong == 0, "%llu words of the namespace differ", (unsigned long long)wrong);
    EXPECT(cs.violations == 0 && cs.errors_other == 0, "controller: %llu violations, %llu errors",
           (unsigned long long)cs.violations, (unsigned long long)cs.errors_other);
    EXPECT(cs.reads == s.reads && cs.writes == s.writes && cs.flushes >= 1,
           "controller %llu reads, %llu writes, %llu flushes; cache %llu reads, %llu writes",
           (unsigned long long)cs.reads, (unsigned long long)cs.writes, (unsigned long long)cs.flushes,
           (unsigned long long)s.reads, (unsigned long long)s.writes);
    EXPECT(s.violations == 0 && s.io_errors == 0 && gpumem_cache_check_quiescent(r.cache) == 0, "cache invariants");
    char detail[200];
    snprintf(detail, sizeof detail, "%u threads, %s, %llu fills, %llu evictions, %llu write-backs, %llu NVMe commands",
             threads, fused ? "cooperative launch" : "own stream", (unsigned long long)s.fills,
             (unsigned long long)s.evictions, (unsigned long long)s.writebacks, (unsigned long long)cs.commands);
    test_end("cache over NVMe pairs served by the GPU-resident controller", detail);
    free(host);
    cudaStreamDestroy(ctl_stream);
    cudaStreamDestroy(work);
    cudaFree(a);
    cudaFree(reads);
    cudaFree(writes);
    cudaFree(fst);
    cudaFree(written);
    cudaFree(pair_list);
    cudaFree(mem);
    cudaFree(ns);
    cudaFreeHost(control);
}

int main(int argc, char **argv) {
    TestArgs args = parse_args(argc, argv, true);
    small_run = args.small;
    if (no_gpu("test_cache_gpu")) return 0;
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    test_grouping();
    test_coalesced_reads();
    for (uint32_t policy = GPUMEM_POLICY_FIRST; policy < GPUMEM_POLICY_KINDS; policy++) test_eviction(policy);
    test_writes_flush();
    test_over_gpu_controller(args.fused);
    printf("test_cache_gpu: %s\n", tests_failed ? "FAILED" : "all passed");
    return tests_failed ? 1 : 0;
}
