// Cache throughput on host threads, each measurement with its baseline in the
// same run:
//   hit_faa / hit_cas     hits per second with gpumem's fetch-add reference
//                         count against a compare-and-swap reference count
//                         (the dissertation's baseline, §6.2) on the same
//                         cache. Thread t reads element i*T + t, so neighbouring
//                         threads share a line, as in §6.5 (thread i reads
//                         element i): contention per line grows with the line.
//   miss_cache / miss_direct  line reads per second through a cache that
//                         misses on every access (a few slots, random lines
//                         of a 256 MiB namespace) against the same reads done
//                         directly on the queue pairs: the cost of the miss path.
//
//   make bench   (writes bench/results/cache-<host>.json and .md with ratios)
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "cas_baseline.h"

namespace {

constexpr uint64_t kHitBytes = 4u << 20;  // resident data of the hit benchmarks

struct HitRig {
    std::vector<unsigned char> mem;
    gpumem_cache *cache = nullptr;
    explicit HitRig(uint32_t line_bytes) : mem(kHitBytes) {
        for (size_t i = 0; i < mem.size(); i++) mem[i] = (unsigned char)(i * 7);
        gpumem_cache_desc d = gpumem_cache_desc_default();
        d.n_lines = kHitBytes / line_bytes;
        d.line_bytes = line_bytes;
        d.n_slots = (uint32_t)d.n_lines;
        d.backing = gpumem_cache_backing_memory(mem.data());
        if (gpumem_cache_create(&d, &cache) != GPUMEM_OK) abort();
        for (uint64_t l = 0; l < d.n_lines; l++) {  // warm: every line resident
            void *p;
            if (gpumem_cache_acquire(cache, l, 1, 0, &p) != GPUMEM_OK) abort();
            gpumem_cache_release(cache, l, 1);
        }
    }
    ~HitRig() { gpumem_cache_destroy(cache); }
};

HitRig *g_hit;

template <bool kFetchAdd>
void BM_Hit(benchmark::State &state) {
    const uint32_t line_bytes = (uint32_t)state.range(0);
    if (state.thread_index() == 0) g_hit = new HitRig(line_bytes);
    const uint64_t n_elems = kHitBytes / 8, T = (uint64_t)state.threads(), t = (uint64_t)state.thread_index();
    uint64_t i = 0, sum = 0;
    for (auto _ : state) {
        uint64_t e = (i++ * T + t) % n_elems, line = e * 8 / line_bytes;
        void *p;
        if (kFetchAdd) {
            if (gpumem_cache_acquire(g_hit->cache, line, 1, 0, &p) != GPUMEM_OK) {
                state.SkipWithError("acquire");
                break;
            }
        } else {
            if (!(p = cas_acquire(g_hit->cache, line))) abort();  // all resident
        }
        uint64_t v;
        memcpy(&v, (unsigned char *)p + (e * 8) % line_bytes, 8);
        sum += v;
        gpumem_cache_release(g_hit->cache, line, 1);
    }
    benchmark::DoNotOptimize(sum);
    state.SetItemsProcessed(state.iterations());
    if (state.thread_index() == 0) {
        gpumem_cache_stats s;
        gpumem_cache_get_stats(g_hit->cache, &s);
        if (s.misses != s.fills || s.violations) state.SkipWithError("cache changed during the hit run");
        delete g_hit;
        g_hit = nullptr;
    }
}

// Misses: a 256 MiB RAM namespace behind 4 pairs, a cache of 1024 slots (random
// lines: at most 1024 / 8192 = 12.5 % hits with 64 KiB lines, under 2 % with 4 KiB).
struct MissRig {
    gpumem_swctl *ctl = nullptr;
    gpumem_nvme_qp *pairs[4] = {};
    gpumem_cache *cache = nullptr;
    uint64_t n_lines;
    explicit MissRig(uint32_t line_bytes) {
        gpumem_swctl_config c = gpumem_swctl_config_default();
        c.lba_bytes = 512;
        c.n_blocks = (256u << 20) / 512;
        if (gpumem_swctl_create(&c, &ctl) != GPUMEM_OK) abort();
        for (auto &p : pairs)
            if (gpumem_swctl_add_qp(ctl, 256, &p) != GPUMEM_OK) abort();
        if (gpumem_swctl_start(ctl) != GPUMEM_OK) abort();
        n_lines = (256u << 20) / line_bytes;
        gpumem_cache_desc d = gpumem_cache_desc_default();
        d.n_lines = n_lines;
        d.line_bytes = line_bytes;
        d.n_slots = 1024;
        gpumem_nvme_ns ns = gpumem_swctl_ns(ctl);
        d.backing = gpumem_cache_backing_nvme(pairs, 1, 4, &ns, 0, GPUMEM_CACHE_STRIPE);
        if (gpumem_cache_create(&d, &cache) != GPUMEM_OK) abort();
        // Touch the slots once, as a long-lived cache would have: otherwise the
        // first fill of each slot pays page faults that the direct reads'
        // reused buffer never does.
        memset(cache->data, 0, (size_t)d.n_slots * line_bytes);
    }
    ~MissRig() {
        gpumem_swctl_stop(ctl);
        gpumem_swctl_stats s;
        gpumem_swctl_get_stats(ctl, &s);
        if (s.violations) fprintf(stderr, "bench: %lu protocol violations!\n", (unsigned long)s.violations);
        gpumem_cache_destroy(cache);
        gpumem_swctl_destroy(ctl);
    }
};

MissRig *g_miss;

template <bool kCache>
void BM_Miss(benchmark::State &state) {
    const uint32_t line_bytes = (uint32_t)state.range(0);
    if (state.thread_index() == 0) g_miss = new MissRig(line_bytes);
    std::vector<unsigned char> own(line_bytes + 4096);
    unsigned char *buf = (unsigned char *)GPUMEM_ALIGN_UP((uintptr_t)own.data(), 4096);
    std::vector<uint64_t> prp_list(512 + 512);
    uint64_t *list = (uint64_t *)GPUMEM_ALIGN_UP((uintptr_t)prp_list.data(), 4096);
    uint64_t rng = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1), sum = 0;
    for (auto _ : state) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        uint64_t line = rng % g_miss->n_lines;
        if (kCache) {
            void *p = nullptr;
            gpumem_status st;
            // EAGAIN: every slot was busy for full_sweeps sweeps; this thread holds nothing, so retry
            while ((st = gpumem_cache_acquire(g_miss->cache, line, 1, 0, &p)) == GPUMEM_EAGAIN) {
            }
            if (st != GPUMEM_OK) {
                state.SkipWithError("acquire");
                break;
            }
            sum += *(unsigned char *)p;
            gpumem_cache_release(g_miss->cache, line, 1);
        } else {
            uint64_t prp1, prp2;
            gpumem_nvme_qp *qp = g_miss->pairs[(line) % 4];  // the cache's choice of pair for this line
            gpumem_nvme_prp_identity(buf, line_bytes, list, 512, &prp1, &prp2);
            if (gpumem_nvme_qp_read(qp, line * (line_bytes / 512), line_bytes / 512, prp1, prp2, nullptr) !=
                GPUMEM_OK) {
                state.SkipWithError("read");
                break;
            }
            sum += buf[0];
        }
    }
    benchmark::DoNotOptimize(sum);
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * line_bytes);
    if (state.thread_index() == 0) {
        delete g_miss;
        g_miss = nullptr;
    }
}

}  // namespace

#define HIT_THREADS Threads(1)->Threads(2)->Threads(4)->Threads(8)->Threads(16)->Threads(32)->Threads(64)
#define MISS_THREADS Threads(1)->Threads(4)->Threads(16)->Threads(64)
#define LINES Arg(512)->Arg(4096)->Arg(65536)
BENCHMARK_TEMPLATE(BM_Hit, true)->Name("hit_faa")->LINES->HIT_THREADS->UseRealTime()->MinTime(0.3);
BENCHMARK_TEMPLATE(BM_Hit, false)->Name("hit_cas")->LINES->HIT_THREADS->UseRealTime()->MinTime(0.3);
BENCHMARK_TEMPLATE(BM_Miss, true)->Name("miss_cache")->LINES->MISS_THREADS->UseRealTime()->MinTime(0.3);
BENCHMARK_TEMPLATE(BM_Miss, false)->Name("miss_direct")->LINES->MISS_THREADS->UseRealTime()->MinTime(0.3);

BENCHMARK_MAIN();
