// GPU benchmarks of gpumem, each against its baseline or limit in the same run
// (plain CUDA, cudaEvent timing). Writes bench/results/gpu-<gpu name>.json and
// .md (ratios to the baseline).
//
//   queue    submissions per second (submit + complete, one NVMe Flush each,
//            a null I/O) against client threads (1K .. 1M) and queue pairs
//            (1 .. 128), the pairs served by the GPU-resident controller with
//            instant completion; baseline: a mutex-guarded queue on the same
//            rings and controller (one spin lock per pair around every
//            submission and every completion scan). The dissertation measured
//            110K, 550K and 818K IOPS for locking, base and optimised designs
//            on one queue pair (notes/bam.md).
//   hits     cache hit lookups per second, every line resident: fetch-add
//            reference count with warp coalescing, without it, and the
//            compare-and-swap count (bench/cas_baseline.h). BaM reached about
//            5.8 G lookups/s on an A100.
//   array    reading an array through the cache (gpumem_cache_ref_get, every
//            line resident) against reading the same array directly from GPU
//            memory in the same pattern: the limit. Each warp reads whole
//            lines, its 32 lanes 32 consecutive elements per step.
//   clients  throughput against client threads (1K .. 1M, one Flush each) on
//            one pair, for both controllers: the host-thread controller
//            (gpumem_swctl; for GPU clients its rings pinned and mapped, the
//            pair's client state in GPU memory, never parking:
//            gpumem_swctl_config_gpu_clients) against host threads on a pair
//            of the same controller code in the same run (the baseline), and the
//            GPU-resident one (the queue rows, against the mutex queue).
//   waitcap  the device wait cap (gpumem_nvme_qp_set_wait_max_ns) swept on one
//            pair of each controller, against the default cap in the same run.
//   misses   line fills per second through a cache that misses on almost every
//            access, over pairs of the GPU controller with an IOPS cap, against
//            that cap (the limit), and with no cap.
//
//   build/cuda/bench_gpu.bin [RESULTS_DIR] [--quick]      (make gpu-bench)
//
// Built a second time with GPUMEM_NO_STATS (build/cuda/bench_gpu_nostats.bin),
// it measures the cache groups (hits, array) with the statistics compiled out;
// its rows carry "stats": false. bench/plot_gpu.py draws throughput against
// client threads and compares the two builds. Every controller run is under a
// watchdog (tests/cuda/watch.h) and every kernel under a deadline.
#include <cuda_runtime.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPUMEM_IMPLEMENTATION
#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "../cas_baseline.h"
#include "../../tests/cuda/cuda_check.h"
#include "../../tests/cuda/cache_rig.h"
#include "../../tests/cuda/watch.h"
#include <pthread.h>
#include <unistd.h>

#if defined(GPUMEM_NO_STATS)
static const bool kStats = false; // statistics compiled out: checks use content only
#define OUT_SUFFIX "-nostats"
#else
static const bool kStats = true;
#define OUT_SUFFIX ""
#endif

// ---- results ------------------------------------------------------------------

struct Result {
    char group[16], variant[24];
    uint32_t threads, pairs, arg;
    double rate; // operations per second
    const char *unit;
    bool ok; // counts and checks held
};
static Result results[512];
static int g_sms = 132; // set from the device in main
static int n_results = 0;
// Where results go as they are measured (set in main), so that a failure or
// a hang later in the run loses at most the row in flight.
static const char *g_dir = "bench/results";
static cudaDeviceProp g_prop;
static void write_outputs(const char *dir, const cudaDeviceProp &prop, bool quiet);
// Every kernel of this program, preloaded before a GPU controller starts
// (filled in main, where the kernels are declared).
static const void *bench_kernels[16];
static uint32_t n_bench_kernels = 0;

static void record(const char *group, const char *variant, uint32_t threads, uint32_t pairs, uint32_t arg,
                   double rate, const char *unit, bool ok) {
    Result &r = results[n_results++];
    snprintf(r.group, sizeof r.group, "%s", group);
    snprintf(r.variant, sizeof r.variant, "%s", variant);
    r.threads = threads, r.pairs = pairs, r.arg = arg, r.rate = rate, r.unit = unit, r.ok = ok;
    printf("%-7s %-14s threads %8u pairs %4u arg %8u  %14.0f %s%s\n", group, variant, threads, pairs, arg, rate, unit,
           ok ? "" : "  (CHECK FAILED)");
    fflush(stdout);
    {   // one JSON line per measurement, appended and flushed at once
        char path[512];
        snprintf(path, sizeof path, "%s/gpu-run.jsonl", g_dir);
        FILE *f = fopen(path, "a");
        if (f) {
            fprintf(f, "{\"gpu\": \"%s\", \"group\": \"%s\", \"variant\": \"%s\", \"threads\": %u, \"pairs\": %u, "
                       "\"arg\": %u, \"rate\": %.1f, \"unit\": \"%s\", \"checks_ok\": %s, \"stats\": %s}\n",
                    g_prop.name, group, variant, threads, pairs, arg, rate, unit, ok ? "true" : "false",
                    kStats ? "true" : "false");
            fclose(f);
        }
    }
    write_outputs(g_dir, g_prop, true); // the JSON document and the table so far
}

static const Result *find(const char *group, const char *variant, uint32_t threads, uint32_t pairs, uint32_t arg) {
    for (int i = 0; i < n_results; i++) {
        const Result &r = results[i];
        if (!strcmp(r.group, group) && !strcmp(r.variant, variant) && r.threads == threads && r.pairs == pairs &&
            r.arg == arg)
            return &r;
    }
    return NULL;
}

// ---- the GPU controller, set up afresh for each run -----------------------------

// Set the device wait cap of pairs in GPU memory (the setter runs where the
// pair can be written).
__global__ void set_wait_cap(gpumem_nvme_qp **pairs, uint32_t n, uint32_t ns) {
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) gpumem_nvme_qp_set_wait_max_ns(pairs[i], ns);
}


struct Ctl {
    gpumem_nvme_gpuctl_desc d;
    void *mem = nullptr;
    void *ns = nullptr;
    uint32_t *control = nullptr;
    gpumem_nvme_qp **pairs = nullptr; // the pairs' addresses (managed array)
    cudaStream_t stream;
    uint32_t servers = 0;
    GpuctlWatch *watch = nullptr; // while the controller runs

    // managed: the pairs in managed memory, so that the host can read them
    // (gpumem_cache_init checks the pairs' namespace); else GPU memory.
    Ctl(uint32_t n_pairs, uint32_t depth, uint64_t ns_bytes, uint32_t max_blocks, bool managed = false) {
        d = gpumem_nvme_gpuctl_desc_default();
        d.n_pairs = n_pairs;
        d.depth = depth;
        d.n_cids = depth;
        d.lba_bytes = 512;
        d.n_blocks = ns_bytes / 512;
        d.max_blocks = max_blocks;
        CHECK(cudaHostAlloc((void **)&control, 2 * sizeof *control, cudaHostAllocMapped));
        CHECK(cudaMalloc(&ns, ns_bytes));
        CHECK(cudaMemset(ns, 0x5A, ns_bytes));
        d.ram = ns;
        d.control = control;
        if (managed) CHECK(cudaMallocManaged(&mem, gpumem_nvme_gpuctl_bytes(&d)));
        else CHECK(cudaMalloc(&mem, gpumem_nvme_gpuctl_bytes(&d)));
        CHECK(cudaMallocManaged((void **)&pairs, n_pairs * sizeof *pairs));
        for (uint32_t i = 0; i < n_pairs; i++) pairs[i] = gpumem_nvme_gpuctl_pair(mem, i);
        CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    }
    // (Re)initialise and start the persistent block; wait_cap_ns (0: the
    // default) is set on every pair before it starts.
    void start(uint64_t iops, uint32_t wait_cap_ns = 0) {
        d.iops = iops;
        if (gpumem_nvme_gpuctl_init_cuda(mem, gpumem_nvme_gpuctl_bytes(&d), &d) != GPUMEM_OK) {
            fprintf(stderr, "controller init failed\n");
            exit(1);
        }
        if (wait_cap_ns) {
            set_wait_cap<<<1, 128>>>(pairs, d.n_pairs, wait_cap_ns);
            CHECK(cudaGetLastError());
            CHECK(cudaStreamSynchronize(0));
        }
        servers = d.n_pairs < 128 ? d.n_pairs : 128;
        servers = (servers + 31) / 32 * 32;
        // Every kernel of this program is loaded before the controller runs:
        // under lazy loading a kernel first launched later would never start.
        if (gpumem_nvme_gpuctl_start((gpumem_nvme_gpuctl *)mem, &d, servers, stream, bench_kernels, n_bench_kernels,
                                     10000) != GPUMEM_OK) {
            fprintf(stderr, "controller did not start\n");
            exit(1);
        }
        watch = new GpuctlWatch((gpumem_nvme_gpuctl *)mem, &d, "bench_gpu: GPU controller", 30000);
    }
    gpumem_nvme_sw_stats stop() {
        gpumem_nvme_sw_stats s;
        delete watch;
        watch = nullptr;
        gpumem_nvme_gpuctl_stop(&d);
        wait_stream(stream, 60, "controller stop");
        if (gpumem_nvme_gpuctl_get_stats_cuda((gpumem_nvme_gpuctl *)mem, &s) != GPUMEM_OK) exit(1);
        return s;
    }
    ~Ctl() {
        cudaStreamDestroy(stream);
        cudaFree(pairs);
        cudaFree(mem);
        cudaFree(ns);
        cudaFreeHost(control);
    }
};

// Time `launch` on a non-blocking stream with events; seconds.
template <typename F>
static double timed(F launch) {
    cudaStream_t s;
    cudaEvent_t a, b;
    float ms = 0;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a, s));
    launch(s);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(b, s));
    wait_stream(s, 300, "benchmark kernel");
    CHECK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(s);
    return ms * 1e-3;
}

// ---- queue: lock-free pairs against a mutex-guarded queue -----------------------

// The baseline: one spin lock per pair guards the whole queue state. Command
// ID = SQ position; a position is reused once its previous command's owner
// has collected the completion.
#define MQ_DEPTH 1024u
struct MutexQueue {
    gpumem_nvme_cmd *sq;
    gpumem_nvme_cpl *cq;
    uint32_t *sq_db, *cq_db;
    uint32_t lock, tail, sq_head, cq_head, phase;
    uint32_t state[MQ_DEPTH]; // 0 free, 1 in flight, 2 done
};

__global__ void mq_init(MutexQueue *q, gpumem_nvme_qp **pairs, uint32_t n) {
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        q[i].sq = pairs[i]->sq;
        q[i].cq = pairs[i]->cq;
        q[i].sq_db = pairs[i]->sq_doorbell;
        q[i].cq_db = pairs[i]->cq_doorbell;
        q[i].lock = q[i].tail = q[i].sq_head = q[i].cq_head = 0;
        q[i].phase = 1;
        for (uint32_t k = 0; k < MQ_DEPTH; k++) q[i].state[k] = 0;
    }
}

__device__ static void mq_lock(MutexQueue *q) {
    gpumem_backoff b = gpumem_backoff_start();
    while (gpumem_atomic_exchange_u32(&q->lock, 1, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_DEVICE) != 0)
        gpumem_backoff_pause(&b);
}
__device__ static void mq_unlock(MutexQueue *q) {
    gpumem_atomic_store_u32(&q->lock, 0, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_DEVICE);
}

// Lock held: consume every posted completion, then ring the CQ doorbell.
__device__ static void mq_harvest(MutexQueue *q) {
    uint32_t n = 0;
    for (;;) {
        gpumem_nvme_cpl *e = &q->cq[q->cq_head];
        // Acquire, system scope: pairs with the controller's release store of dw3.
        uint32_t dw3 = gpumem_atomic_load_u32(&e->dw3, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM);
        if (((dw3 >> 16) & 1u) != q->phase) break;
        q->state[dw3 & (MQ_DEPTH - 1)] = 2;
        q->sq_head = e->dw2 & 0xFFFFu;
        q->cq_head = (q->cq_head + 1) & (MQ_DEPTH - 1);
        if (q->cq_head == 0) q->phase ^= 1u;
        n++;
    }
    if (n) gpumem__doorbell_write(q->cq_db, q->cq_head);
}

__device__ static void mq_flush(MutexQueue *q, uint32_t nsid) {
    gpumem_backoff b = gpumem_backoff_start();
    uint32_t cid;
    for (;;) { // submit
        mq_lock(q);
        mq_harvest(q);
        cid = q->tail;
        bool room = ((q->tail + 1) & (MQ_DEPTH - 1)) != q->sq_head && q->state[cid] == 0;
        if (room) {
            gpumem_nvme_cmd c;
            gpumem__cmd_clear(&c);
            c.cdw0 = GPUMEM_NVME_OP_FLUSH | (cid << 16);
            c.nsid = nsid;
            q->state[cid] = 1;
            q->sq[cid] = c;
            q->tail = (q->tail + 1) & (MQ_DEPTH - 1);
            gpumem__doorbell_write(q->sq_db, q->tail); // fence, then the MMIO store
        }
        mq_unlock(q);
        if (room) break;
        gpumem_backoff_pause(&b);
    }
    for (b = gpumem_backoff_start();;) { // complete
        mq_lock(q);
        mq_harvest(q);
        bool done = q->state[cid] == 2;
        if (done) q->state[cid] = 0;
        mq_unlock(q);
        if (done) return;
        gpumem_backoff_pause(&b);
    }
}

__global__ void queue_lockfree(gpumem_nvme_qp **pairs, uint32_t n_pairs, uint32_t threads, uint32_t per,
                               unsigned long long *bad) {
    if (blockIdx.x * blockDim.x + threadIdx.x >= threads) return;
    gpumem_nvme_qp *qp = pairs[gpumem_sm_id() % n_pairs]; // a pair per SM, as in BaM
    for (uint32_t i = 0; i < per; i++)
        if (gpumem_nvme_qp_flush(qp, NULL) != GPUMEM_OK) atomicAdd(bad, 1ull);
}

__global__ void queue_mutex(MutexQueue *q, uint32_t n_pairs, uint32_t threads, uint32_t per) {
    if (blockIdx.x * blockDim.x + threadIdx.x >= threads) return;
    MutexQueue *mine = &q[gpumem_sm_id() % n_pairs];
    for (uint32_t i = 0; i < per; i++) mq_flush(mine, 1);
}

static void bench_queue(bool quick) {
    const uint32_t thread_counts[] = {1024, 16384, 65536, 262144, 1048576};
    const uint32_t pair_counts[] = {1, 8, 32, 128};
    unsigned long long *bad;
    MutexQueue *mq;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    CHECK(cudaMalloc((void **)&mq, 128 * sizeof *mq));
    for (uint32_t pairs : pair_counts) {
        Ctl ctl(pairs, MQ_DEPTH, 1 << 20, 8);
        for (uint32_t threads : thread_counts) {
            if (quick && threads > 65536) continue;
            uint32_t per = threads >= (1u << 20) ? 1 : (1u << 20) / threads;
            if (quick) per = per > 16 ? 16 : per;
            uint64_t cmds = (uint64_t)threads * per;
            unsigned blocks = (threads + 255) / 256;
            // lock-free
            CHECK(cudaMemset(bad, 0, sizeof *bad));
            ctl.start(0);
            double s = timed([&](cudaStream_t st) { queue_lockfree<<<blocks, 256, 0, st>>>(ctl.pairs, pairs, threads, per, bad); });
            gpumem_nvme_sw_stats cs = ctl.stop();
            unsigned long long b = 0;
            CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
            record("queue", "lockfree", threads, pairs, 0, cmds / s, "cmd/s",
                   b == 0 && cs.commands == cmds && cs.flushes == cmds && cs.violations == 0);
            // mutex-guarded, same rings and controller
            ctl.start(0);
            mq_init<<<1, 128>>>(mq, ctl.pairs, pairs);
            CHECK(cudaGetLastError());
            CHECK(cudaStreamSynchronize(0));
            s = timed([&](cudaStream_t st) { queue_mutex<<<blocks, 256, 0, st>>>(mq, pairs, threads, per); });
            cs = ctl.stop();
            record("queue", "mutex", threads, pairs, 0, cmds / s, "cmd/s",
                   cs.commands == cmds && cs.flushes == cmds && cs.violations == 0);
        }
    }
    cudaFree(mq);
    cudaFree(bad);
}

// ---- cache hits ------------------------------------------------------------------

enum { HIT_COALESCED = 0, HIT_FAA = 1, HIT_CAS = 2 };

// Thread t reads element i*T + t: neighbouring threads share a line.
__global__ void hits(gpumem_cache *c, uint64_t n_words, uint32_t per, int kind, unsigned long long *bad) {
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x, T = (uint64_t)gridDim.x * blockDim.x, sum = 0;
    for (uint32_t i = 0; i < per; i++) {
        uint64_t e = (i * T + t) % n_words, line = e * 8 >> c->line_shift;
        void *p = NULL;
        gpumem_status st = GPUMEM_OK;
        if (kind == HIT_COALESCED) st = gpumem_cache_acquire_coalesced(c, line, 0, &p);
        else if (kind == HIT_FAA) st = gpumem_cache_acquire(c, line, 1, 0, &p);
        else p = cas_acquire(c, line);
        if (st != GPUMEM_OK || !p) {
            atomicAdd(bad, 1ull);
            continue;
        }
        uint64_t v = ((const uint64_t *)p)[e % (c->line_bytes / 8)];
        if (v != initial_word(e)) atomicAdd(bad, 1ull);
        sum += v;
        if (kind == HIT_COALESCED) gpumem_cache_release_coalesced(c, line);
        else gpumem_cache_release(c, line, 1);
    }
    if (sum == 42) atomicAdd(bad, 0ull); // keep the loads
}

// The array pattern of both kernels below: warp w of W reads lines w, w+W,
// ...; in each line its lane k reads elements k, k+32, ..., so a step of the
// warp is 32 consecutive elements (one coalesced 256-byte access), and a
// lane's reference keeps the line for all its elements there.
__global__ void direct_sum(const uint64_t *a, uint64_t n, uint32_t per_line, unsigned long long *bad) {
    const uint64_t warp = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32;
    const uint64_t warps = (uint64_t)gridDim.x * blockDim.x / 32;
    uint64_t sum = 0;
    for (uint64_t line = warp; line * per_line < n; line += warps)
        for (uint64_t e = line * per_line + threadIdx.x % 32; e < (line + 1) * per_line && e < n; e += 32) {
            uint64_t v = a[e];
            if (v != initial_word(e)) atomicAdd(bad, 1ull);
            sum += v;
        }
    if (sum == 42) atomicAdd(bad, 0ull);
}

__global__ void array_sum(const gpumem_cache_array *a, uint64_t n, uint32_t per_line, unsigned long long *bad) {
    const uint64_t warp = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32;
    const uint64_t warps = (uint64_t)gridDim.x * blockDim.x / 32;
    uint64_t sum = 0;
    gpumem_cache_ref r = gpumem_cache_ref_make(a);
    for (uint64_t line = warp; line * per_line < n; line += warps)
        for (uint64_t e = line * per_line + threadIdx.x % 32; e < (line + 1) * per_line && e < n; e += 32) {
            uint64_t v = 0;
            if (gpumem_cache_ref_get(&r, e, &v) != GPUMEM_OK || v != initial_word(e)) atomicAdd(bad, 1ull);
            sum += v;
        }
    gpumem_cache_ref_drop(&r);
    if (sum == 42) atomicAdd(bad, 0ull);
}

static void bench_hits(bool quick) {
    const uint32_t lines[] = {512, 4096, 65536};
    const uint32_t threads = quick ? 65536 : 1u << 20, per = 64;
    unsigned long long *bad;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    for (uint32_t lb : lines) {
        Rig h(lb, (4u << 20) / lb, (4u << 20) / lb); // every line fits
        hits<<<h.n_words / 256, 256>>>(h.cache, h.n_words, 1, HIT_FAA, bad); // warm: every line resident
        CHECK(cudaDeviceSynchronize());
        const char *names[] = {"faa_coalesced", "faa", "cas"};
        for (int kind = 0; kind < 3; kind++) {
            CHECK(cudaMemset(bad, 0, sizeof *bad));
            gpumem_cache_stats before, after;
            gpumem_cache_get_stats(h.cache, &before);
            double s = timed([&](cudaStream_t st) { hits<<<threads / 256, 256, 0, st>>>(h.cache, h.n_words, per, kind, bad); });
            gpumem_cache_get_stats(h.cache, &after);
            unsigned long long b;
            CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
            record("hits", names[kind], threads, 0, lb, (double)threads * per / s, "lookup/s",
                   b == 0 && (!kStats || (after.fills == before.fills &&
                                          after.hits - before.hits == (uint64_t)threads * per)));
        }
    }
    // The array view against direct loads: 256 MiB, every line resident.
    {
        const uint64_t bytes = quick ? (32u << 20) : (256u << 20);
        Rig h(4096, bytes / 4096, (uint32_t)(bytes / 4096));
        gpumem_cache_array *a;
        CHECK(cudaMallocManaged(&a, sizeof *a));
        *a = gpumem_cache_array_make(h.cache, 8, 0, h.n_words);
        const unsigned blocks = (unsigned)g_sms * 16;
        const uint32_t per_line = 4096 / 8;
        array_sum<<<blocks, 256>>>(a, h.n_words, per_line, bad); // warm
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemset(bad, 0, sizeof *bad));
        double sc = timed([&](cudaStream_t st) { array_sum<<<blocks, 256, 0, st>>>(a, h.n_words, per_line, bad); });
        double sd = timed([&](cudaStream_t st) { direct_sum<<<blocks, 256, 0, st>>>(h.backing, h.n_words, per_line, bad); });
        unsigned long long b;
        CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
        record("array", "cache", blocks * 256, 0, (uint32_t)(bytes >> 20), h.n_words / sc, "elem/s", b == 0);
        record("array", "direct", blocks * 256, 0, (uint32_t)(bytes >> 20), h.n_words / sd, "elem/s", b == 0);
        cudaFree(a);
    }
    cudaFree(bad);
}

// ---- clients: throughput against client threads, host-thread controller ---------

struct HostClient {
    gpumem_nvme_qp *qp;
    uint32_t n;
    uint64_t bad;
};
static void *host_client(void *p) {
    HostClient *c = (HostClient *)p;
    for (uint32_t i = 0; i < c->n; i++)
        if (gpumem_nvme_qp_flush(c->qp, NULL) != GPUMEM_OK) c->bad++;
    return nullptr;
}

// A run that would take longer than this at the rate measured one step
// before is skipped (and said so): a collapsed configuration must not eat
// the run.
static const double kRunBudgetS = 60;

// A started host-thread controller with one pair of MQ_DEPTH, set up for
// host-thread clients or (gpu) for GPU clients: rings pinned and mapped, the
// pair's client state in GPU memory, a controller that never parks
// (gpumem_swctl_config_gpu_clients).
static gpumem_swctl *clients_ctl(bool gpu, gpumem_nvme_qp **qp) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl = nullptr;
    if (gpu) gpumem_swctl_config_gpu_clients(&cfg);
    cfg.lba_bytes = 512;
    cfg.n_blocks = 2048;
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK || gpumem_swctl_add_qp(ctl, MQ_DEPTH, qp) != GPUMEM_OK ||
        gpumem_swctl_start(ctl) != GPUMEM_OK) {
        fprintf(stderr, "host-thread controller setup failed\n");
        exit(1);
    }
    return ctl;
}

// Host threads on one pair of the host-thread controller (its client state in
// host memory), then GPU threads (1K .. 1M, one Flush each) on one pair of a
// controller set up for them (client state in GPU memory); the GPU rows'
// ratio is to the host threads' rate. Then the device wait cap swept at 16K
// GPU threads.
static void bench_clients(bool quick) {
    const uint32_t thread_counts[] = {1024, 4096, 16384, 65536, 262144, 1048576};
    const uint32_t caps[] = {256, 2048, 16384};
    gpumem_swctl *ctl = nullptr;
    gpumem_nvme_qp *qp = nullptr, **pairs = nullptr;
    gpumem_swctl_stats before, after;
    unsigned long long *bad;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    CHECK(cudaMallocManaged((void **)&pairs, sizeof *pairs));
    ctl = clients_ctl(false, &qp);
    {   // the baseline: host threads, as many as the machine has cores less two (2 .. 16)
        SwctlWatch watch(ctl, "bench_gpu: host-thread controller, host clients", 30000);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        uint32_t n = cores > 18 ? 16 : cores > 4 ? (uint32_t)cores - 2 : 2, per = quick ? 2000 : 20000;
        HostClient hc[16];
        pthread_t t[16];
        gpumem_swctl_get_stats(ctl, &before);
        double t0 = wall_s();
        for (uint32_t i = 0; i < n; i++) hc[i] = HostClient{qp, per, 0}, pthread_create(&t[i], nullptr, host_client, &hc[i]);
        uint64_t b = 0;
        for (uint32_t i = 0; i < n; i++) pthread_join(t[i], nullptr), b += hc[i].bad;
        double secs = wall_s() - t0;
        gpumem_swctl_get_stats(ctl, &after);
        record("clients", "hostctl_host", n, 1, 0, (double)n * per / secs, "cmd/s",
               b == 0 && after.commands - before.commands == (uint64_t)n * per && after.violations == 0);
    }
    gpumem_swctl_stop(ctl);
    gpumem_swctl_destroy(ctl);
    ctl = clients_ctl(true, &qp); // qp is now a device pointer
    pairs[0] = qp;
    SwctlWatch watch(ctl, "bench_gpu: host-thread controller, GPU clients", 30000);
    double last_rate = 0;
    for (uint32_t threads : thread_counts) {
        if (quick && threads > 65536) continue;
        if (last_rate > 0 && threads / last_rate > kRunBudgetS) {
            printf("clients hostctl_gpu: %u threads and more skipped (would take %.0f s at %.0f cmd/s)\n", threads,
                   threads / last_rate, last_rate);
            break;
        }
        CHECK(cudaMemset(bad, 0, sizeof *bad));
        gpumem_swctl_get_stats(ctl, &before);
        double s = timed([&](cudaStream_t st) { queue_lockfree<<<(threads + 255) / 256, 256, 0, st>>>(pairs, 1, threads, 1, bad); });
        gpumem_swctl_get_stats(ctl, &after);
        unsigned long long b = 0;
        CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
        last_rate = threads / s;
        record("clients", "hostctl_gpu", threads, 1, 0, last_rate, "cmd/s",
               b == 0 && after.commands - before.commands == threads && after.violations == 0);
    }
    for (uint32_t cap : caps) { // the wait cap, host-thread controller: the pair's client state is GPU memory
        const uint32_t threads = 16384;
        if (last_rate > 0 && threads / last_rate > kRunBudgetS) break;
        set_wait_cap<<<1, 32>>>(pairs, 1, cap);
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemset(bad, 0, sizeof *bad));
        gpumem_swctl_get_stats(ctl, &before);
        double s = timed([&](cudaStream_t st) { queue_lockfree<<<threads / 256, 256, 0, st>>>(pairs, 1, threads, 1, bad); });
        gpumem_swctl_get_stats(ctl, &after);
        unsigned long long b = 0;
        CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
        record("waitcap", "hostctl", threads, 1, cap, threads / s, "cmd/s",
               b == 0 && after.commands - before.commands == threads && after.violations == 0);
    }
    gpumem_swctl_stop(ctl);
    gpumem_swctl_destroy(ctl);
    cudaFree(pairs);
    cudaFree(bad);
}

// The wait cap on one pair of the GPU controller (16K threads, 16 Flushes each).
static void bench_waitcap_gpuctl(bool quick) {
    const uint32_t caps[] = {256, 2048, 16384}, threads = 16384, per = quick ? 4 : 16;
    unsigned long long *bad;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    Ctl ctl(1, MQ_DEPTH, 1 << 20, 8);
    for (uint32_t cap : caps) {
        CHECK(cudaMemset(bad, 0, sizeof *bad));
        ctl.start(0, cap);
        double s = timed([&](cudaStream_t st) { queue_lockfree<<<threads / 256, 256, 0, st>>>(ctl.pairs, 1, threads, per, bad); });
        gpumem_nvme_sw_stats cs = ctl.stop();
        unsigned long long b = 0;
        CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
        record("waitcap", "gpuctl", threads, 1, cap, (double)threads * per / s, "cmd/s",
               b == 0 && cs.commands == (uint64_t)threads * per && cs.violations == 0);
    }
    cudaFree(bad);
}

// ---- misses against the controller's IOPS cap -----------------------------------

__global__ void miss_reads(gpumem_cache *c, uint64_t n_lines, uint32_t per, unsigned long long *bad) {
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x, rng = (t + 1) * 0x9E3779B97F4A7C15ull;
    for (uint32_t i = 0; i < per; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        uint64_t line = rng % n_lines;
        void *p;
        gpumem_status st;
        while ((st = gpumem_cache_acquire(c, line, 1, 0, &p)) == GPUMEM_EAGAIN) {}
        if (st != GPUMEM_OK) {
            atomicAdd(bad, 1ull);
            continue;
        }
        if (*(const volatile uint32_t *)p != 0x5A5A5A5Au) atomicAdd(bad, 1ull);
        gpumem_cache_release(c, line, 1);
    }
}

static void bench_misses(bool quick) {
    const uint64_t caps[] = {0, 1000000, 4000000};
    const uint32_t line = 4096, pairs = 32, slots = 4096, threads = quick ? 16384 : 65536, per = quick ? 4 : 16;
    const uint64_t ns_bytes = 1u << 30, n_lines = ns_bytes / line;
    unsigned long long *bad;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    Ctl ctl(pairs, 1024, ns_bytes, line / 512, true);
    for (uint64_t cap : caps) {
        // The pairs initialised before the cache reads their namespace.
        if (gpumem_nvme_gpuctl_init_cuda(ctl.mem, gpumem_nvme_gpuctl_bytes(&ctl.d), &ctl.d) != GPUMEM_OK) exit(1);
        gpumem_nvme_ns ns = gpumem_nvme_gpuctl_ns(&ctl.d);
        gpumem_cache_backing backing = gpumem_cache_backing_nvme(ctl.pairs, 1, pairs, &ns, 0, GPUMEM_CACHE_STRIPE);
        Rig r(line, n_lines, slots, &backing);
        gpumem_cache *c = r.cache;
        CHECK(cudaMemset(bad, 0, sizeof *bad));
        ctl.start(cap);
        double s = timed([&](cudaStream_t st) { miss_reads<<<threads / 256, 256, 0, st>>>(c, n_lines, per, bad); });
        gpumem_nvme_sw_stats cs = ctl.stop();
        gpumem_cache_stats cst;
        gpumem_cache_get_stats(c, &cst);
        unsigned long long b;
        CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
        record("misses", "cache_fills", threads, pairs, (uint32_t)(cap / 1000), cst.fills / s, "fill/s",
               b == 0 && cs.violations == 0 && cs.reads == cst.reads);
        if (cap) record("misses", "iops_cap", threads, pairs, (uint32_t)(cap / 1000), (double)cap, "cmd/s", true);
    }
    cudaFree(bad);
}

// ---- output -------------------------------------------------------------------------

static void write_outputs(const char *dir, const cudaDeviceProp &prop, bool quiet) {
    char name[256], path[512];
    size_t k = 0;
    for (const char *p = prop.name; *p && k + 1 < sizeof name; p++) name[k++] = isalnum((unsigned char)*p) ? *p : '-';
    name[k] = 0;
    snprintf(path, sizeof path, "%s/gpu-%s%s.json", dir, name, OUT_SUFFIX);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f, "{\n  \"gpu\": \"%s\", \"sms\": %d, \"cc\": \"%d.%d\",\n  \"results\": [\n", prop.name,
            prop.multiProcessorCount, prop.major, prop.minor);
    for (int i = 0; i < n_results; i++) {
        const Result &r = results[i];
        fprintf(f,
                "    {\"group\": \"%s\", \"variant\": \"%s\", \"threads\": %u, \"pairs\": %u, \"arg\": %u, "
                "\"rate\": %.1f, \"unit\": \"%s\", \"checks_ok\": %s}%s\n",
                r.group, r.variant, r.threads, r.pairs, r.arg, r.rate, r.unit, r.ok ? "true" : "false",
                i + 1 < n_results ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    if (!quiet) printf("wrote %s\n", path);

    snprintf(path, sizeof path, "%s/gpu-%s%s.md", dir, name, OUT_SUFFIX);
    f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f, "# gpumem on %s (%d SMs, compute capability %d.%d)%s\n\n", prop.name, prop.multiProcessorCount,
            prop.major, prop.minor, kStats ? "" : ", statistics compiled out (GPUMEM_NO_STATS)");
    fprintf(f, "Every row's ratio is to the baseline (or limit) measured in the same run. A row marked ✗ failed\n"
               "its counts or content checks.\n\n");
    struct Pair {
        const char *group, *num, *den, *title, *argname;
    } pairs[] = {
        {"queue", "lockfree", "mutex", "Queue: submissions per second (Flush, instant GPU controller), lock-free vs mutex-guarded queue", "-"},
        {"hits", "faa_coalesced", "faa", "Cache hits: warp-coalesced vs per-thread fetch-add", "line bytes"},
        {"hits", "faa", "cas", "Cache hits: fetch-add vs compare-and-swap reference count", "line bytes"},
        {"array", "cache", "direct", "Array read through the cache (all resident) vs direct loads (the limit)", "MiB"},
        {"misses", "cache_fills", "iops_cap", "Cache misses: line fills per second vs the controller's IOPS cap (the limit)", "cap (K IOPS)"},
    };
    for (const Pair &p : pairs) {
        fprintf(f, "## %s\n\n| threads | pairs | %s | %s (/s) | %s (/s) | ratio |\n|---:|---:|---:|---:|---:|---:|\n",
                p.title, p.argname, p.num, p.den);
        for (int i = 0; i < n_results; i++) {
            const Result &a = results[i];
            if (strcmp(a.group, p.group) || strcmp(a.variant, p.num)) continue;
            const Result *b = find(p.group, p.den, a.threads, a.pairs, a.arg);
            if (!b) continue;
            fprintf(f, "| %u | %u | %u | %.0f%s | %.0f%s | %.2fx |\n", a.threads, a.pairs, a.arg, a.rate,
                    a.ok ? "" : " ✗", b->rate, b->ok ? "" : " ✗", a.rate / b->rate);
        }
        fprintf(f, "\n");
    }
    // Throughput against client threads, one pair: the host-thread controller
    // against its host-thread clients; each controller against its best.
    {
        const Result *host = nullptr;
        double best_host = 0, best_gpu = 0;
        for (int i = 0; i < n_results; i++) {
            const Result &r = results[i];
            if (!strcmp(r.group, "clients") && !strcmp(r.variant, "hostctl_host")) host = &r;
            if (!strcmp(r.group, "clients") && !strcmp(r.variant, "hostctl_gpu") && r.rate > best_host) best_host = r.rate;
            if (!strcmp(r.group, "queue") && !strcmp(r.variant, "lockfree") && r.pairs == 1 && r.rate > best_gpu)
                best_gpu = r.rate;
        }
        if (host || best_gpu > 0) {
            fprintf(f, "## Throughput against client threads, one pair (Flush, instant media)\n\n");
            if (host)
                fprintf(f, "Host-thread controller, %u host threads: %.0f cmd/s%s (the baseline of the hostctl rows).\n\n",
                        host->threads, host->rate, host->ok ? "" : " ✗");
            fprintf(f, "| controller | GPU client threads | cmd/s | vs host-thread clients | vs its best |\n"
                       "|---|---:|---:|---:|---:|\n");
            for (int i = 0; i < n_results; i++) {
                const Result &r = results[i];
                if (!strcmp(r.group, "clients") && !strcmp(r.variant, "hostctl_gpu"))
                    fprintf(f, "| host thread | %u | %.0f%s | %s%.2fx | %.2f |\n", r.threads, r.rate, r.ok ? "" : " ✗",
                            host ? "" : "n/a ", host ? r.rate / host->rate : 0.0, r.rate / best_host);
                if (!strcmp(r.group, "queue") && !strcmp(r.variant, "lockfree") && r.pairs == 1)
                    fprintf(f, "| GPU-resident | %u | %.0f%s | - | %.2f |\n", r.threads, r.rate, r.ok ? "" : " ✗",
                            r.rate / best_gpu);
            }
            fprintf(f, "\n");
        }
    }
    // The device wait cap, each row against the default (256 ns) of its controller.
    bool cap_table = false;
    for (int i = 0; i < n_results; i++) {
        const Result &r = results[i];
        if (strcmp(r.group, "waitcap")) continue;
        const Result *base = find("waitcap", r.variant, r.threads, r.pairs, 256);
        if (!cap_table)
            fprintf(f, "## Device wait cap (gpumem_nvme_qp_set_wait_max_ns), one pair, against 256 ns\n\n"
                       "| controller | threads | cap (ns) | cmd/s | ratio |\n|---|---:|---:|---:|---:|\n");
        cap_table = true;
        fprintf(f, "| %s | %u | %u | %.0f%s | %.2fx |\n", r.variant, r.threads, r.arg, r.rate, r.ok ? "" : " ✗",
                base ? r.rate / base->rate : 0.0);
    }
    if (cap_table) fprintf(f, "\n");
    // Uncapped misses have no limit row: list them on their own.
    for (int i = 0; i < n_results; i++)
        if (!strcmp(results[i].group, "misses") && results[i].arg == 0)
            fprintf(f, "Uncapped controller: %.0f fills/s (%u threads, %u pairs).\n", results[i].rate,
                    results[i].threads, results[i].pairs);
    fprintf(f, "\nAnchors (notes/bam.md): 110K / 550K / 818K IOPS for locking, base and optimised queues on one\n"
               "pair (dissertation); about 5.8 G cache lookups/s on an A100 (BaM).\n");
    fclose(f);
    if (!quiet) printf("wrote %s\n", path);
}

int main(int argc, char **argv) {
    const char *dir = "bench/results";
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else dir = argv[i];
    }
    if (no_gpu("bench_gpu")) return 0;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    g_sms = prop.multiProcessorCount;
    g_dir = dir;
    g_prop = prop;
    const void *kernels[] = {(const void *)mq_init, (const void *)queue_lockfree, (const void *)queue_mutex,
                             (const void *)hits, (const void *)direct_sum, (const void *)array_sum,
                             (const void *)miss_reads, (const void *)set_wait_cap};
    for (const void *k : kernels) bench_kernels[n_bench_kernels++] = k;
    printf("bench_gpu%s on %s (%d SMs)\n", OUT_SUFFIX, prop.name, prop.multiProcessorCount);
    if (kStats) {
        bench_queue(quick);
        bench_waitcap_gpuctl(quick);
        bench_clients(quick);
    }
    bench_hits(quick);
    if (kStats) bench_misses(quick);
    write_outputs(dir, prop, false);
    int failed = 0;
    for (int i = 0; i < n_results; i++) failed += !results[i].ok;
    if (failed) printf("bench_gpu: %d measurements failed their checks\n", failed);
    return failed ? 1 : 0;
}
