// GPU benchmarks of gpumem, each against its baseline or limit in the same run
// (plain CUDA, cudaEvent timing). Appends every row to
// RESULTS_DIR/gpu-run-<gpu name>.jsonl as it is measured, and writes
// RESULTS_DIR/gpu-<gpu name>.json and .md (ratios to the baseline).
//
//   queue    submissions per second (submit + complete, one NVMe Flush each,
//            a null I/O) against client threads (1K .. 1M) and queue pairs
//            (1 .. 128; a client warp uses pair warp mod P, and rows with
//            fewer warps than pairs are not run), the pairs served by the
//            GPU-resident controller with instant completion; baseline: a
//            mutex-guarded queue on the same rings and controller (one spin
//            lock per pair around every submission and every completion
//            scan). The dissertation measured
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
// Time: the whole run ends within GPU_BENCH_BOUND seconds (environment;
// default 1500). The groups run cheapest first (hits, array, waitcap,
// misses, queue, clients). Each row gets an equal share of the time left
// (at most kRowCapS), and a row that repeats its operation per thread is
// sized by a short probe (a sixteenth of the operations) to fit half its
// share. A row's kernel polls a stop word in GPU memory; when its share is
// spent the host sets it, the threads finish the operation they are in and
// leave, and the row is reported as "did not finish" (its rate over the
// operations done by then, "finished": false), not left to hang. A kernel
// that does not leave after the stop word ends the run (abort_run). Every
// controller run is under a watchdog (tests/cuda/watch.h).
//
// Built a second time with GPUMEM_NO_STATS (build/cuda/bench_gpu_nostats.bin),
// it measures the cache groups (hits, array) with the statistics compiled out;
// its rows carry "stats": false. bench/plot_gpu.py draws throughput against
// client threads and compares the two builds.
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
#include "../../tests/cuda/gpuctl_run.h"
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
    bool ok;       // counts and checks held
    bool finished; // false: stopped when its share of the time was spent
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

/* The device's name as a file name part: letters and digits, the rest '-'
 * ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3"). */
static void device_file_name(const cudaDeviceProp &prop, char *name, size_t n) {
    size_t k = 0;
    for (const char *p = prop.name; *p && k + 1 < n; p++) name[k++] = isalnum((unsigned char)*p) ? *p : '-';
    name[k] = 0;
}

static const char *mark(const Result &r) { return !r.ok ? " ✗" : !r.finished ? " (dnf)" : ""; }

static void record(const char *group, const char *variant, uint32_t threads, uint32_t pairs, uint32_t arg,
                   double rate, const char *unit, bool ok, bool finished = true) {
    if (n_results == (int)(sizeof results / sizeof results[0])) abort_run("more rows than the results table holds");
    Result &r = results[n_results++];
    snprintf(r.group, sizeof r.group, "%s", group);
    snprintf(r.variant, sizeof r.variant, "%s", variant);
    r.threads = threads, r.pairs = pairs, r.arg = arg, r.rate = rate, r.unit = unit, r.ok = ok, r.finished = finished;
    printf("%-7s %-14s threads %8u pairs %4u arg %8u  %14.0f %s%s%s\n", group, variant, threads, pairs, arg, rate, unit,
           ok ? "" : "  (CHECK FAILED)", finished ? "" : "  (DID NOT FINISH: stopped at its time budget)");
    fflush(stdout);
    {   // one JSON line per measurement, appended and flushed at once, in a file per device
        char path[512], name[256];
        device_file_name(g_prop, name, sizeof name);
        snprintf(path, sizeof path, "%s/gpu-run-%s.jsonl", g_dir, name);
        FILE *f = fopen(path, "a");
        if (f) {
            fprintf(f, "{\"gpu\": \"%s\", \"group\": \"%s\", \"variant\": \"%s\", \"threads\": %u, \"pairs\": %u, "
                       "\"arg\": %u, \"rate\": %.1f, \"unit\": \"%s\", \"checks_ok\": %s, \"finished\": %s, "
                       "\"stats\": %s}\n",
                    g_prop.name, group, variant, threads, pairs, arg, rate, unit, ok ? "true" : "false",
                    finished ? "true" : "false", kStats ? "true" : "false");
            fclose(f);
        } else {
            perror(path);
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

// ---- the time budget and the stop word ------------------------------------------

static double g_deadline = 0;        // wall_s() by which the last row must have ended
static int g_rows_left = 0;          // rows planned and not yet run (main plans them)
static int g_rows_dnf = 0, g_rows_skipped = 0;
static const double kRowCapS = 60;   // no row gets more, however much time is left

/* This row's share of the time left: an equal share per row still planned
 * (cheap rows leave theirs to the later ones), at most kRowCapS. */
static double row_budget() {
    double left = g_deadline - wall_s();
    double share = left / (g_rows_left > 0 ? g_rows_left : 1);
    return share < kRowCapS ? share : kRowCapS;
}
static void row_done() {
    if (g_rows_left > 0) g_rows_left--;
}

// The stop word and the count of operations that stopped threads left
// undone, in GPU memory: the kernels poll the word (an L2 hit, not a PCIe
// read); the host sets it by a copy on a stream of its own, which does not
// wait for the kernel.
static uint32_t *g_stop, *g_stop_one; // device word; a pinned 1 to copy there
static unsigned long long *g_undone;  // device
static unsigned long long *g_zero;    // pinned 0, copied over both to reset them
static cudaStream_t g_side;           // non-blocking: setting, resetting and reading those

__device__ static bool row_stopped(const uint32_t *stop) {
    return gpumem_atomic_load_u32((uint32_t *)stop, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE) != 0;
}

/* Clear the stop word and the undone count (before any kernel that polls
 * them), while a controller may be running: by copies from pinned memory,
 * not memsets, which the CUDA guide lists among the operations that keep
 * kernels of other streams from running at the same time. */
static void reset_stop() {
    CHECK(cudaMemcpyAsync(g_stop, g_zero, sizeof *g_stop, cudaMemcpyHostToDevice, g_side));
    CHECK(cudaMemcpyAsync(g_undone, g_zero, sizeof *g_undone, cudaMemcpyHostToDevice, g_side));
    wait_stream(g_side, 30, "resetting the stop word");
}

struct Timing {
    double s;                    // the kernel's time (events)
    bool finished;               // false: stopped at its budget
    unsigned long long undone;   // operations the stopped threads left undone
};

/* Run `launch` on a non-blocking stream of its own, timed by events; when
 * budget_s has passed, set the stop word, and give the kernel at most 60 s
 * more to leave (then abort_run: it is hung). */
template <typename F>
static Timing timed(F launch, double budget_s) {
    cudaStream_t s;
    cudaEvent_t a, b;
    float ms = 0;
    Timing t = {0, true, 0};
    reset_stop();
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a, s));
    launch(s);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(b, s));
    const double end = wall_s() + budget_s;
    cudaError_t e;
    while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
        if (t.finished && wall_s() > end) {
            t.finished = false;
            printf("        (%.0f s budget spent: stopping the row's kernel)\n", budget_s);
            fflush(stdout);
            CHECK(cudaMemcpyAsync(g_stop, g_stop_one, sizeof *g_stop, cudaMemcpyHostToDevice, g_side));
            wait_stream(s, 60, "a benchmark kernel, after its stop word was set");
            break;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    wait_stream(s, 1, "benchmark kernel"); // done by now; reports a fault
    CHECK(cudaEventElapsedTime(&ms, a, b));
    CHECK(cudaMemcpyAsync(&t.undone, g_undone, sizeof t.undone, cudaMemcpyDeviceToHost, g_side));
    wait_stream(g_side, 30, "reading the undone count");
    t.s = ms * 1e-3;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(s);
    return t;
}

/* One run of a row: `per` operations per thread (or what the stop word left). */
struct RowRun {
    double s;       // seconds
    uint64_t done;  // operations done
    bool finished, ok;
};

/* Measure a row: `run(per, budget_s)` does `per` operations in each of
 * `threads` threads. A row with per_full > 1 is probed first with a
 * sixteenth of them, and then run with as many (up to per_full) as fit in
 * half its budget at the probe's rate; a row whose probe used up the room
 * is reported from the probe. */
template <typename R>
static void measure(const char *group, const char *variant, uint32_t threads, uint32_t pairs, uint32_t arg,
                    const char *unit, uint32_t per_full, R run) {
    const double budget = row_budget();
    if (budget < 1) {
        printf("%-7s %-14s threads %8u pairs %4u arg %8u  skipped: the time budget is spent\n", group, variant,
               threads, pairs, arg);
        g_rows_skipped++;
        row_done();
        return;
    }
    const double t0 = wall_s();
    RowRun r;
    uint32_t per = per_full;
    if (per_full > 1) {
        const uint32_t probe = per_full / 16 ? per_full / 16 : 1;
        r = run(probe, budget / 4);
        per = probe;
        if (r.finished && r.ok && r.done) {
            const double fit = r.done / r.s * (budget / 2) / threads; // operations per thread in half the budget
            per = fit >= per_full ? per_full : fit <= probe ? probe : (uint32_t)fit;
        }
        if (per != probe) { // the rest of the row's share, and never less than the half it was sized for
            const double rest = budget - (wall_s() - t0);
            r = run(per, rest > budget / 2 ? rest : budget / 2);
        }
    } else {
        r = run(per, budget);
    }
    if (!r.finished) g_rows_dnf++;
    record(group, variant, threads, pairs, arg, r.s > 0 ? r.done / r.s : 0, unit, r.ok, r.finished);
    row_done();
}
// ---- the GPU controller, set up afresh for each run -----------------------------

// Set the device wait cap of pairs in GPU memory (the setter runs where the
// pair can be written).
__global__ void set_wait_cap(gpumem_nvme_qp **pairs, uint32_t n, uint32_t ns) {
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) gpumem_nvme_qp_set_wait_max_ns(pairs[i], ns);
}

// Once a controller has failed to start, the later controller rows are not
// tried (each would wait out the same failure): they fail at once.
static bool g_gpuctl_broken = false;

struct Ctl {
    gpumem_swctl_gpu_desc d;
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
        d = gpumem_swctl_gpu_desc_default();
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
        if (managed) CHECK(cudaMallocManaged(&mem, gpumem_swctl_gpu_bytes(&d)));
        else CHECK(cudaMalloc(&mem, gpumem_swctl_gpu_bytes(&d)));
        CHECK(cudaMallocManaged((void **)&pairs, n_pairs * sizeof *pairs));
        for (uint32_t i = 0; i < n_pairs; i++) pairs[i] = gpumem_swctl_gpu_pair(mem, i);
        CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    }
    // (Re)initialise and start the persistent block; wait_cap_ns (0: the
    // default) is set on every pair before it starts. False (said why) if it
    // is not running: then launch nothing that uses its pairs.
    bool start(uint64_t iops, uint32_t wait_cap_ns = 0) {
        if (g_gpuctl_broken) {
            printf("        (GPU controller: not tried, one failed to start earlier)\n");
            return false;
        }
        d.iops = iops;
        gpumem_status st = gpumem_swctl_gpu_init_cuda(mem, gpumem_swctl_gpu_bytes(&d), &d);
        if (st != GPUMEM_OK) {
            printf("FAIL bench_gpu: GPU controller init: %s\n", gpumem_status_str(st));
            g_gpuctl_broken = true;
            return false;
        }
        if (wait_cap_ns) {
            set_wait_cap<<<1, 128>>>(pairs, d.n_pairs, wait_cap_ns);
            CHECK(cudaGetLastError());
            wait_kernels(30, "set_wait_cap");
        }
        // A warp serves a pair: a warp each for up to 128 pairs (4,096
        // threads, several blocks: gpumem_swctl_gpu_start splits them).
        servers = 32 * (d.n_pairs < 128 ? d.n_pairs : 128);
        // Every kernel of this program is loaded before the controller runs:
        // under lazy loading a kernel first launched later would never start.
        if (start_gpuctl((gpumem_swctl_gpu *)mem, &d, servers, stream, bench_kernels, n_bench_kernels,
                         "bench_gpu: GPU controller") != GPUMEM_OK) {
            g_gpuctl_broken = true;
            return false;
        }
        // The stall bound is past a row's longest share, so that a slow row
        // is stopped by its budget, and only a dead one by the watchdog.
        watch = new GpuctlWatch((gpumem_swctl_gpu *)mem, &d, "bench_gpu: GPU controller",
                                (uint32_t)(kRowCapS * 1000) + 30000);
        return true;
    }
    gpumem_target_stats stop() {
        gpumem_target_stats s;
        delete watch;
        watch = nullptr;
        stop_gpuctl(&d, stream, 60);
        if (gpumem_swctl_gpu_get_stats_cuda((gpumem_swctl_gpu *)mem, &s) != GPUMEM_OK)
            abort_run("reading the GPU controller's statistics");
        return s;
    }
    ~Ctl() {
        if (watch) stop(); // the watchdog stopped and joined, the block ended, before anything is freed
        cudaStreamDestroy(stream);
        cudaFree(pairs);
        cudaFree(mem);
        cudaFree(ns);
        cudaFreeHost(control);
    }
    Ctl(const Ctl &) = delete;
    Ctl &operator=(const Ctl &) = delete;
};

// A row that could not run (its controller did not start): a failed row.
static RowRun not_run() { return RowRun{1, 0, true, false}; }

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

// One Flush through the mutex queue; false if the row was stopped before it
// was submitted (once submitted, it is waited for: the controller runs on).
__device__ static bool mq_flush(MutexQueue *q, uint32_t nsid, const uint32_t *stop) {
    gpumem_backoff b = gpumem_backoff_start();
    uint32_t cid;
    for (;;) { // submit
        if (row_stopped(stop)) return false;
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
        if (done) return true;
        gpumem_backoff_pause(&b);
    }
}

// The pair a client thread of a queue row uses: its warp's, round robin, so
// that a row of P pairs uses all P whatever SMs its blocks land on (a pair
// per SM, as BaM does, reached only as many pairs as the row had blocks).
// Rows with fewer warps than pairs are not run (queue_row_runs).
__device__ static uint32_t queue_row_pair(uint32_t n_pairs) {
    return (uint32_t)(((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / GPUMEM_WARP_WIDTH % n_pairs);
}

// Every kernel below polls the row's stop word between operations; a thread
// that sees it adds what it leaves undone to *undone and returns.
__global__ void queue_lockfree(gpumem_nvme_qp **pairs, uint32_t n_pairs, uint32_t threads, uint32_t per,
                               unsigned long long *bad, const uint32_t *stop, unsigned long long *undone) {
    if (blockIdx.x * blockDim.x + threadIdx.x >= threads) return;
    gpumem_nvme_qp *qp = pairs[queue_row_pair(n_pairs)];
    for (uint32_t i = 0; i < per; i++) {
        if (row_stopped(stop)) {
            atomicAdd(undone, (unsigned long long)(per - i));
            return;
        }
        if (gpumem_nvme_qp_flush(qp, NULL) != GPUMEM_OK) atomicAdd(bad, 1ull);
    }
}

__global__ void queue_mutex(MutexQueue *q, uint32_t n_pairs, uint32_t threads, uint32_t per, const uint32_t *stop,
                            unsigned long long *undone) {
    if (blockIdx.x * blockDim.x + threadIdx.x >= threads) return;
    MutexQueue *mine = &q[queue_row_pair(n_pairs)];
    for (uint32_t i = 0; i < per; i++)
        if (!mq_flush(mine, 1, stop)) {
            atomicAdd(undone, (unsigned long long)(per - i));
            return;
        }
}

static const uint32_t kQueueThreads[] = {1024, 16384, 65536, 262144, 1048576};
static const uint32_t kQueuePairs[] = {1, 8, 32, 128};

// Whether the queue group measures `threads` clients on `pairs` pairs: not
// past 64K threads with --quick, and not with fewer warps than pairs (a pair
// without a warp would sit idle: queue_row_pair).
static bool queue_row_runs(uint32_t threads, uint32_t pairs, bool quick) {
    return !(quick && threads > 65536) && threads / GPUMEM_WARP_WIDTH >= pairs;
}

static void bench_queue(bool quick) {
    unsigned long long *bad;
    MutexQueue *mq;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    CHECK(cudaMalloc((void **)&mq, 128 * sizeof *mq));
    for (uint32_t pairs : kQueuePairs) {
        Ctl ctl(pairs, MQ_DEPTH, 1 << 20, 8);
        for (uint32_t threads : kQueueThreads) {
            if (!queue_row_runs(threads, pairs, quick)) continue;
            uint32_t per_full = threads >= (1u << 20) ? 1 : (1u << 20) / threads;
            if (quick) per_full = per_full > 16 ? 16 : per_full;
            const unsigned blocks = (threads + 255) / 256;
            measure("queue", "lockfree", threads, pairs, 0, "cmd/s", per_full, [&](uint32_t per, double budget) {
                CHECK(cudaMemset(bad, 0, sizeof *bad));
                if (!ctl.start(0)) return not_run();
                Timing t = timed([&](cudaStream_t st) {
                    queue_lockfree<<<blocks, 256, 0, st>>>(ctl.pairs, pairs, threads, per, bad, g_stop, g_undone);
                }, budget);
                gpumem_target_stats cs = ctl.stop();
                unsigned long long b = 0;
                CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
                const uint64_t done = (uint64_t)threads * per - t.undone;
                return RowRun{t.s, done, t.finished,
                              b == 0 && cs.commands == done && cs.flushes == done && cs.violations == 0};
            });
            // mutex-guarded, same rings and controller
            measure("queue", "mutex", threads, pairs, 0, "cmd/s", per_full, [&](uint32_t per, double budget) {
                if (!ctl.start(0)) return not_run();
                mq_init<<<1, 128>>>(mq, ctl.pairs, pairs);
                CHECK(cudaGetLastError());
                wait_kernels(30, "mq_init");
                Timing t = timed([&](cudaStream_t st) {
                    queue_mutex<<<blocks, 256, 0, st>>>(mq, pairs, threads, per, g_stop, g_undone);
                }, budget);
                gpumem_target_stats cs = ctl.stop();
                const uint64_t done = (uint64_t)threads * per - t.undone;
                return RowRun{t.s, done, t.finished, cs.commands == done && cs.flushes == done && cs.violations == 0};
            });
        }
    }
    cudaFree(mq);
    cudaFree(bad);
}
static int queue_rows(bool quick) { // two rows (lock-free, mutex) for each pair of counts measured
    int n = 0;
    for (uint32_t pairs : kQueuePairs)
        for (uint32_t threads : kQueueThreads) n += queue_row_runs(threads, pairs, quick) ? 2 : 0;
    return n;
}

// ---- cache hits ------------------------------------------------------------------

enum { HIT_COALESCED = 0, HIT_FAA = 1, HIT_CAS = 2 };

// Thread t reads element i*T + t: neighbouring threads share a line. The
// stop word is polled every 16th lookup (a lookup is nanoseconds).
__global__ void hits(gpumem_cache *c, uint64_t n_words, uint32_t per, int kind, unsigned long long *bad,
                     const uint32_t *stop, unsigned long long *undone) {
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x, T = (uint64_t)gridDim.x * blockDim.x, sum = 0;
    for (uint32_t i = 0; i < per; i++) {
        if ((i & 15u) == 0 && row_stopped(stop)) {
            atomicAdd(undone, (unsigned long long)(per - i));
            break;
        }
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
// lane's reference keeps the line for all its elements there. Stopped (the
// word polled once a line), a lane counts one undone and leaves: the row
// then has no rate.
__global__ void direct_sum(const uint64_t *a, uint64_t n, uint32_t per_line, unsigned long long *bad,
                           const uint32_t *stop, unsigned long long *undone) {
    const uint64_t warp = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32;
    const uint64_t warps = (uint64_t)gridDim.x * blockDim.x / 32;
    uint64_t sum = 0;
    for (uint64_t line = warp; line * per_line < n; line += warps) {
        if (row_stopped(stop)) {
            atomicAdd(undone, 1ull);
            break;
        }
        for (uint64_t e = line * per_line + threadIdx.x % 32; e < (line + 1) * per_line && e < n; e += 32) {
            uint64_t v = a[e];
            if (v != initial_word(e)) atomicAdd(bad, 1ull);
            sum += v;
        }
    }
    if (sum == 42) atomicAdd(bad, 0ull);
}

__global__ void array_sum(const gpumem_cache_array *a, uint64_t n, uint32_t per_line, unsigned long long *bad,
                          const uint32_t *stop, unsigned long long *undone) {
    const uint64_t warp = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32;
    const uint64_t warps = (uint64_t)gridDim.x * blockDim.x / 32;
    uint64_t sum = 0;
    gpumem_cache_ref r = gpumem_cache_ref_make(a);
    for (uint64_t line = warp; line * per_line < n; line += warps) {
        if (row_stopped(stop)) {
            atomicAdd(undone, 1ull);
            break;
        }
        for (uint64_t e = line * per_line + threadIdx.x % 32; e < (line + 1) * per_line && e < n; e += 32) {
            uint64_t v = 0;
            if (gpumem_cache_ref_get(&r, e, &v) != GPUMEM_OK || v != initial_word(e)) atomicAdd(bad, 1ull);
            sum += v;
        }
    }
    gpumem_cache_ref_drop(&r);
    if (sum == 42) atomicAdd(bad, 0ull);
}

static void bench_hits(bool quick) {
    const uint32_t lines[] = {512, 4096, 65536};
    const uint32_t threads = quick ? 65536 : 1u << 20;
    unsigned long long *bad;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    for (uint32_t lb : lines) {
        Rig h(lb, (4u << 20) / lb, (4u << 20) / lb); // every line fits
        // warm: every line resident
        reset_stop();
        hits<<<h.n_words / 256, 256>>>(h.cache, h.n_words, 1, HIT_FAA, bad, g_stop, g_undone);
        CHECK(cudaGetLastError());
        wait_kernels(60, "warming the cache");
        const char *names[] = {"faa_coalesced", "faa", "cas"};
        for (int kind = 0; kind < 3; kind++)
            measure("hits", names[kind], threads, 0, lb, "lookup/s", 64, [&](uint32_t per, double budget) {
                CHECK(cudaMemset(bad, 0, sizeof *bad));
                gpumem_cache_stats before, after;
                gpumem_cache_get_stats(h.cache, &before);
                Timing t = timed([&](cudaStream_t st) {
                    hits<<<threads / 256, 256, 0, st>>>(h.cache, h.n_words, per, kind, bad, g_stop, g_undone);
                }, budget);
                gpumem_cache_get_stats(h.cache, &after);
                unsigned long long b;
                CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
                const uint64_t done = (uint64_t)threads * per - t.undone;
                return RowRun{t.s, done, t.finished,
                              b == 0 && (!kStats || (after.fills == before.fills && after.hits - before.hits == done))};
            });
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
        reset_stop();
        array_sum<<<blocks, 256>>>(a, h.n_words, per_line, bad, g_stop, g_undone); // warm
        CHECK(cudaGetLastError());
        wait_kernels(120, "warming the array");
        // One pass over the array each; a stopped pass has no rate (done 0).
        auto pass = [&](bool through_cache, double budget) {
            CHECK(cudaMemset(bad, 0, sizeof *bad));
            Timing t = timed([&](cudaStream_t st) {
                if (through_cache) array_sum<<<blocks, 256, 0, st>>>(a, h.n_words, per_line, bad, g_stop, g_undone);
                else direct_sum<<<blocks, 256, 0, st>>>(h.backing, h.n_words, per_line, bad, g_stop, g_undone);
            }, budget);
            unsigned long long b;
            CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
            return RowRun{t.s, t.undone ? 0 : h.n_words, t.finished, b == 0};
        };
        measure("array", "cache", blocks * 256, 0, (uint32_t)(bytes >> 20), "elem/s", 1,
                [&](uint32_t, double budget) { return pass(true, budget); });
        measure("array", "direct", blocks * 256, 0, (uint32_t)(bytes >> 20), "elem/s", 1,
                [&](uint32_t, double budget) { return pass(false, budget); });
        cudaFree(a);
    }
    cudaFree(bad);
}
static int hits_rows() { return 3 * 3 + 2; }

// ---- clients: throughput against client threads, host-thread controller ---------

// A host thread's Flushes, until n are done or *stop is set.
struct HostClient {
    gpumem_nvme_qp *qp;
    uint32_t n;
    const int *stop;
    uint64_t bad, done;
    int finished; // set (release) when the thread is done
};
static void *host_client(void *p) {
    HostClient *c = (HostClient *)p;
    for (uint32_t i = 0; i < c->n && !__atomic_load_n(c->stop, __ATOMIC_RELAXED); i++, c->done++)
        if (gpumem_nvme_qp_flush(c->qp, NULL) != GPUMEM_OK) c->bad++;
    __atomic_store_n(&c->finished, 1, __ATOMIC_RELEASE);
    return nullptr;
}

// A started host-thread controller with one pair of MQ_DEPTH, set up for
// host-thread clients or (gpu) for GPU clients: rings pinned and mapped, the
// pair's client state in GPU memory, a controller that never parks
// (gpumem_swctl_config_gpu_clients). NULL (said why) if it did not start.
static gpumem_swctl *clients_ctl(bool gpu, gpumem_nvme_qp **qp) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl = nullptr;
    gpumem_status st;
    if (gpu) gpumem_swctl_config_gpu_clients(&cfg);
    cfg.lba_bytes = 512;
    cfg.n_blocks = 2048;
    if ((st = gpumem_swctl_create(&cfg, &ctl)) != GPUMEM_OK || (st = gpumem_swctl_add_qp(ctl, MQ_DEPTH, qp)) != GPUMEM_OK ||
        (st = gpumem_swctl_start(ctl)) != GPUMEM_OK) {
        printf("FAIL bench_gpu: host-thread controller setup: %s\n", gpumem_status_str(st));
        if (ctl) gpumem_swctl_destroy(ctl);
        return nullptr;
    }
    return ctl;
}

// Host threads on one pair of the host-thread controller (its client state in
// host memory), then GPU threads (1K .. 1M, one Flush each) on one pair of a
// controller set up for them (client state in GPU memory); the GPU rows'
// ratio is to the host threads' rate. Then the device wait cap swept at 16K
// GPU threads. A GPU row that would not fit its share of the time four
// times over at the rate of the row before (or whose row before did not
// finish) is skipped, and so are the rest: the host-thread controller
// collapsed with many GPU clients (notes/gpu-findings.md, 3).
static const uint32_t kClientThreads[] = {1024, 4096, 16384, 65536, 262144, 1048576};
static const uint32_t kCaps[] = {256, 2048, 16384};
static int clients_rows(bool quick) { return 1 + (quick ? 4 : 6) + 3; }

static void bench_clients(bool quick) {
    gpumem_swctl *ctl = nullptr;
    gpumem_nvme_qp *qp = nullptr, **pairs = nullptr;
    unsigned long long *bad;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    CHECK(cudaMallocManaged((void **)&pairs, sizeof *pairs));
    if ((ctl = clients_ctl(false, &qp)) != nullptr) {
        // the baseline: host threads, as many as the machine has cores less two (2 .. 16)
        SwctlWatch watch(ctl, "bench_gpu: host-thread controller, host clients", 30000);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        const uint32_t n = cores > 18 ? 16 : cores > 4 ? (uint32_t)cores - 2 : 2;
        measure("clients", "hostctl_host", n, 1, 0, "cmd/s", quick ? 2000 : 20000, [&](uint32_t per, double budget) {
            HostClient hc[16];
            pthread_t t[16];
            int stop = 0;
            gpumem_swctl_stats before, after;
            gpumem_swctl_get_stats(ctl, &before);
            const double t0 = wall_s();
            for (uint32_t i = 0; i < n; i++)
                hc[i] = HostClient{qp, per, &stop, 0, 0, 0}, pthread_create(&t[i], nullptr, host_client, &hc[i]);
            for (uint32_t i = 0; i < n;) { // wait for each, at most the budget; then stop them
                if (__atomic_load_n(&hc[i].finished, __ATOMIC_ACQUIRE)) i++;
                else if (wall_s() - t0 > budget) __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
                else usleep(1000);
            }
            uint64_t b = 0, done = 0;
            for (uint32_t i = 0; i < n; i++) pthread_join(t[i], nullptr), b += hc[i].bad, done += hc[i].done;
            const double secs = wall_s() - t0;
            gpumem_swctl_get_stats(ctl, &after);
            return RowRun{secs, done, stop == 0,
                          b == 0 && after.commands - before.commands == done && after.violations == 0};
        });
        // the watchdog ends here, before its controller is destroyed
    } else {
        measure("clients", "hostctl_host", 0, 1, 0, "cmd/s", 1, [](uint32_t, double) { return not_run(); });
    }
    if (ctl) {
        gpumem_swctl_stop(ctl);
        gpumem_swctl_destroy(ctl);
    }
    ctl = clients_ctl(true, &qp); // qp is now a device pointer
    pairs[0] = qp;
    {
        SwctlWatch *watch = ctl ? new SwctlWatch(ctl, "bench_gpu: host-thread controller, GPU clients", 90000) : nullptr;
        double last_rate = 0;
        bool give_up = ctl == nullptr, last_dnf = false;
        // One Flush in each of `threads` GPU threads on the pair.
        auto gpu_clients = [&](uint32_t threads, double budget) {
            if (!ctl) return not_run();
            CHECK(cudaMemset(bad, 0, sizeof *bad));
            gpumem_swctl_stats before, after;
            gpumem_swctl_get_stats(ctl, &before);
            Timing t = timed([&](cudaStream_t st) {
                queue_lockfree<<<(threads + 255) / 256, 256, 0, st>>>(pairs, 1, threads, 1, bad, g_stop, g_undone);
            }, budget);
            gpumem_swctl_get_stats(ctl, &after);
            unsigned long long b = 0;
            CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
            const uint64_t done = threads - t.undone;
            last_dnf = !t.finished;
            give_up |= last_dnf;
            last_rate = done / t.s;
            return RowRun{t.s, done, t.finished, b == 0 && after.commands - before.commands == done && after.violations == 0};
        };
        // Skip (and say so) a row that would not fit a quarter of its share
        // at the last rate. A quarter: its threads each do one Flush, so when
        // the stop word is set they are all inside it and the row cannot end
        // early (a row 60 s over its share ends the run: timed), and the rate
        // may fall as threads grow (0.3.0's collapse).
        auto skip = [&](uint32_t threads, const char *variant, uint32_t arg) {
            const double need = last_rate > 0 ? 4.0 * threads / last_rate : 0;
            if (!give_up && need <= row_budget()) return false;
            printf("clients %-14s threads %8u arg %8u  skipped: %s\n", variant, threads, arg,
                   !ctl       ? "no controller"
                   : last_dnf ? "the row before did not finish in its share of the time"
                              : "would not fit a quarter of its share of the time at the last row's rate");
            g_rows_skipped++;
            row_done();
            give_up = true;
            return true;
        };
        for (uint32_t threads : kClientThreads) {
            if (quick && threads > 65536) continue;
            if (skip(threads, "hostctl_gpu", 0)) continue;
            measure("clients", "hostctl_gpu", threads, 1, 0, "cmd/s", 1,
                    [&](uint32_t, double budget) { return gpu_clients(threads, budget); });
        }
        give_up = ctl == nullptr; // the cap rows are 16K threads: tried whatever the largest rows did
        for (uint32_t cap : kCaps) { // the wait cap, host-thread controller: the pair's client state is GPU memory
            const uint32_t threads = 16384;
            if (skip(threads, "waitcap hostctl", cap)) continue;
            set_wait_cap<<<1, 32>>>(pairs, 1, cap);
            CHECK(cudaGetLastError());
            wait_kernels(30, "set_wait_cap");
            measure("waitcap", "hostctl", threads, 1, cap, "cmd/s", 1,
                    [&](uint32_t, double budget) { return gpu_clients(threads, budget); });
        }
        delete watch; // before its controller is stopped and destroyed
    }
    if (ctl) {
        gpumem_swctl_stop(ctl);
        gpumem_swctl_destroy(ctl);
    }
    cudaFree(pairs);
    cudaFree(bad);
}

// The wait cap on one pair of the GPU controller (16K threads, 16 Flushes each).
static void bench_waitcap_gpuctl(bool quick) {
    const uint32_t threads = 16384;
    unsigned long long *bad;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    Ctl ctl(1, MQ_DEPTH, 1 << 20, 8);
    for (uint32_t cap : kCaps)
        measure("waitcap", "gpuctl", threads, 1, cap, "cmd/s", quick ? 4 : 16, [&](uint32_t per, double budget) {
            CHECK(cudaMemset(bad, 0, sizeof *bad));
            if (!ctl.start(0, cap)) return not_run();
            Timing t = timed([&](cudaStream_t st) {
                queue_lockfree<<<threads / 256, 256, 0, st>>>(ctl.pairs, 1, threads, per, bad, g_stop, g_undone);
            }, budget);
            gpumem_target_stats cs = ctl.stop();
            unsigned long long b = 0;
            CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
            const uint64_t done = (uint64_t)threads * per - t.undone;
            return RowRun{t.s, done, t.finished, b == 0 && cs.commands == done && cs.violations == 0};
        });
    cudaFree(bad);
}
static int waitcap_rows() { return 3; }

// ---- misses against the controller's IOPS cap -----------------------------------

// EAGAIN (every slot held) is retried with a sleep, bounded (DeviceRetry); a
// refusal past the bound counts as bad.
__global__ void miss_reads(gpumem_cache *c, uint64_t n_lines, uint32_t per, unsigned long long *bad,
                           const uint32_t *stop, unsigned long long *undone) {
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x, rng = (t + 1) * 0x9E3779B97F4A7C15ull;
    for (uint32_t i = 0; i < per; i++) {
        if (row_stopped(stop)) {
            atomicAdd(undone, (unsigned long long)(per - i));
            return;
        }
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        uint64_t line = rng % n_lines;
        void *p;
        gpumem_status st;
        DeviceRetry retry;
        while ((st = gpumem_cache_acquire(c, line, 1, 0, &p)) == GPUMEM_EAGAIN && retry.pause()) {}
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
    const uint32_t line = 4096, pairs = 32, slots = 4096, threads = quick ? 16384 : 65536;
    const uint64_t ns_bytes = 1u << 30, n_lines = ns_bytes / line;
    unsigned long long *bad;
    CHECK(cudaMalloc((void **)&bad, sizeof *bad));
    Ctl ctl(pairs, 1024, ns_bytes, line / 512, true);
    for (uint64_t cap : caps) {
        // The pairs initialised before the cache reads their namespace.
        gpumem_status init = gpumem_swctl_gpu_init_cuda(ctl.mem, gpumem_swctl_gpu_bytes(&ctl.d), &ctl.d);
        if (init != GPUMEM_OK) {
            printf("FAIL bench_gpu: GPU controller init: %s\n", gpumem_status_str(init));
            measure("misses", "cache_fills", threads, pairs, (uint32_t)(cap / 1000), "fill/s", 1,
                    [](uint32_t, double) { return not_run(); });
            continue;
        }
        gpumem_nvme_ns ns;
        (void)gpumem_swctl_gpu_ns(&ctl.d, &ns);
        gpumem_cache_backing backing = gpumem_cache_backing_nvme(ctl.pairs, 1, pairs, &ns, 0, GPUMEM_CACHE_STRIPE);
        Rig r(line, n_lines, slots, &backing);
        gpumem_cache *c = r.cache;
        // The rate is of line fills (done: fills, not reads).
        measure("misses", "cache_fills", threads, pairs, (uint32_t)(cap / 1000), "fill/s", quick ? 4 : 16,
                [&](uint32_t per, double budget) {
                    CHECK(cudaMemset(bad, 0, sizeof *bad));
                    gpumem_cache_stats before, after;
                    gpumem_cache_get_stats(c, &before);
                    if (!ctl.start(cap)) return not_run();
                    Timing t = timed([&](cudaStream_t st) {
                        miss_reads<<<threads / 256, 256, 0, st>>>(c, n_lines, per, bad, g_stop, g_undone);
                    }, budget);
                    gpumem_target_stats cs = ctl.stop();
                    gpumem_cache_get_stats(c, &after);
                    unsigned long long b;
                    CHECK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
                    return RowRun{t.s, after.fills - before.fills, t.finished,
                                  b == 0 && cs.violations == 0 && (!kStats || cs.reads == after.reads - before.reads)};
                });
        if (cap) record("misses", "iops_cap", threads, pairs, (uint32_t)(cap / 1000), (double)cap, "cmd/s", true);
    }
    cudaFree(bad);
}
static int misses_rows() { return 3; }

// ---- output -------------------------------------------------------------------------

static void write_outputs(const char *dir, const cudaDeviceProp &prop, bool quiet) {
    char name[256], path[512];
    device_file_name(prop, name, sizeof name);
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
                "\"rate\": %.1f, \"unit\": \"%s\", \"checks_ok\": %s, \"finished\": %s}%s\n",
                r.group, r.variant, r.threads, r.pairs, r.arg, r.rate, r.unit, r.ok ? "true" : "false",
                r.finished ? "true" : "false", i + 1 < n_results ? "," : "");
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
               "its counts or content checks; a row marked (dnf) did not finish within its share of the time\n"
               "budget (GPU_BENCH_BOUND) and was stopped: its rate is over the operations done by then.\n\n");
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
            fprintf(f, "| %u | %u | %u | %.0f%s | %.0f%s | %.2fx |\n", a.threads, a.pairs, a.arg, a.rate, mark(a),
                    b->rate, mark(*b), a.rate / b->rate);
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
                        host->threads, host->rate, mark(*host));
            fprintf(f, "| controller | GPU client threads | cmd/s | vs host-thread clients | vs its best |\n"
                       "|---|---:|---:|---:|---:|\n");
            for (int i = 0; i < n_results; i++) {
                const Result &r = results[i];
                if (!strcmp(r.group, "clients") && !strcmp(r.variant, "hostctl_gpu"))
                    fprintf(f, "| host thread | %u | %.0f%s | %s%.2fx | %.2f |\n", r.threads, r.rate, mark(r),
                            host ? "" : "n/a ", host ? r.rate / host->rate : 0.0, r.rate / best_host);
                if (!strcmp(r.group, "queue") && !strcmp(r.variant, "lockfree") && r.pairs == 1)
                    fprintf(f, "| GPU-resident | %u | %.0f%s | - | %.2f |\n", r.threads, r.rate, mark(r),
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
        fprintf(f, "| %s | %u | %u | %.0f%s | %.2fx |\n", r.variant, r.threads, r.arg, r.rate, mark(r),
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
    const double t_start = wall_s();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [RESULTS_DIR] [--quick]   (GPU_BENCH_BOUND: seconds for the whole run)\n", argv[0]);
            return 2;
        } else dir = argv[i];
    }
    const char *bound_env = getenv("GPU_BENCH_BOUND");
    const double bound = bound_env && atof(bound_env) > 0 ? atof(bound_env) : 1500;
    if (no_gpu("bench_gpu")) return 0;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    g_sms = prop.multiProcessorCount;
    g_dir = dir;
    g_prop = prop;
    // The rows must be done by 20 s before the bound (outputs, teardown).
    g_deadline = t_start + bound - 20;
    CHECK(cudaMalloc((void **)&g_stop, sizeof *g_stop));
    CHECK(cudaMalloc((void **)&g_undone, sizeof *g_undone));
    CHECK(cudaHostAlloc((void **)&g_stop_one, sizeof *g_stop_one, cudaHostAllocDefault));
    *g_stop_one = 1;
    CHECK(cudaHostAlloc((void **)&g_zero, sizeof *g_zero, cudaHostAllocDefault));
    *g_zero = 0;
    CHECK(cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking));
    const void *kernels[] = {(const void *)mq_init, (const void *)queue_lockfree, (const void *)queue_mutex,
                             (const void *)hits, (const void *)direct_sum, (const void *)array_sum,
                             (const void *)miss_reads, (const void *)set_wait_cap};
    for (const void *k : kernels) bench_kernels[n_bench_kernels++] = k;
    // Cheapest first, so that a short bound still measures the most.
    g_rows_left = hits_rows() + (kStats ? waitcap_rows() + misses_rows() + queue_rows(quick) + clients_rows(quick) : 0);
    printf("bench_gpu%s on %s (%d SMs): %d rows within %.0f s (GPU_BENCH_BOUND)\n", OUT_SUFFIX, prop.name,
           prop.multiProcessorCount, g_rows_left, bound);
    bench_hits(quick);
    if (kStats) {
        bench_waitcap_gpuctl(quick);
        bench_misses(quick);
        bench_queue(quick);
        bench_clients(quick);
    }
    write_outputs(dir, prop, false);
    int failed = 0;
    for (int i = 0; i < n_results; i++) failed += !results[i].ok;
    printf("bench_gpu%s: %d rows measured in %.0f s, %d failed their checks, %d did not finish in their share of "
           "the time, %d skipped\n",
           OUT_SUFFIX, n_results, wall_s() - t_start, failed, g_rows_dnf, g_rows_skipped);
    return failed ? 1 : 0;
}
