// GPU threads drive gpumem queue pairs against three controllers:
//   1. the host-thread software controller (gpumem_swctl), its ring memory
//      (rings, doorbells, signals) and namespace in pinned, mapped host memory,
//      each pair's client state in GPU memory, and a controller that never
//      parks (gpumem_swctl_config_gpu_clients);
//   2. the GPU-resident controller (gpumem_swctl_gpu) in GPU memory with the
//      namespace in GPU memory, as a persistent block on its own stream;
//   3. the same with the namespace in pinned host memory (every transfer
//      crosses PCIe), run in block 0 of a cooperative launch that also holds
//      the clients (co-residency guaranteed);
//   4. a million client threads on 16 pairs of the GPU controller;
//   5. 64 pairs with a warp each: the controller in several blocks;
// and gpumem_swctl_gpu_start refusing sizes that cannot run.
// Every client writes its own block with its own pattern, reads it back
// (blocking), reads it again asynchronously together with an asynchronous
// Flush, and checks both reads word by word. Every operation is counted; the
// controller's command counts and violation counters must match exactly, and
// the namespace is checked by content afterwards.
//
//   build/cuda/test_nvme_gpu.bin [--small] [--fused]
//     --small  fewer threads (for compute-sanitizer)
//     --fused  run every GPU-controller test as a cooperative launch
//   make gpu-test        (runs where a GPU is present; compiled by make test)
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPUMEM_IMPLEMENTATION
#include "gpumem_swctl.h"

#include "cuda_check.h"
#include "watch.h"
#include "gpuctl_run.h"

#define LBA 512u
#define WORDS (LBA / 4)

__host__ __device__ static uint32_t pattern(uint32_t lba, uint32_t word) { return (lba + 1) * 2654435761u ^ word; }

struct Counts {
    unsigned long long ok;     // operations that completed and checked out
    unsigned long long failed; // operations with a bad status or content
};

struct Clients {
    gpumem_nvme_qp **pairs; // n_pairs pairs
    uint32_t n_pairs;
    uint32_t n;            // clients; client t owns block t
    uint32_t *bufs;        // 2 blocks per client, reachable by the controller
    Counts *counts;
};

// One client: 4 commands, 4 counted operations.
__device__ static void client_io(const Clients &a, uint32_t t) {
    gpumem_nvme_qp *qp = a.pairs[(t >> 5) % a.n_pairs]; // a warp shares a pair
    uint32_t *b0 = a.bufs + (size_t)t * 2 * WORDS, *b1 = b0 + WORDS, w;
    unsigned long long ok = 0, failed = 0;
    int good;
    for (w = 0; w < WORDS; w++) b0[w] = pattern(t, w);
    // The data before the command that carries it; the doorbell write fences
    // too, but another thread may ring it, and this makes the test's intent plain.
    __threadfence_system();
    if (gpumem_nvme_qp_write(qp, t, 1, (uint64_t)(uintptr_t)b0, 0, NULL) == GPUMEM_OK) ok++;
    else failed++;
    for (w = 0; w < WORDS; w++) b0[w] = b1[w] = 0;
    __threadfence_system();
    good = gpumem_nvme_qp_read(qp, t, 1, (uint64_t)(uintptr_t)b0, 0, NULL) == GPUMEM_OK;
    for (w = 0; w < WORDS; w++) good &= ((volatile uint32_t *)b0)[w] == pattern(t, w);
    good ? ok++ : failed++;
    // Asynchronous: a read and a flush out together, reaped in reverse order.
    gpumem_nvme_cmd rd, fl;
    gpumem_nvme_req r0, r1;
    gpumem_nvme_cmd_read(&rd, &qp->ns, t, 1, (uint64_t)(uintptr_t)b1, 0);
    gpumem_nvme_cmd_flush(&fl, &qp->ns);
    gpumem_status s0, s1;
    // No command ID free: the IDs may all be held by threads like this one,
    // each with its first request out, so collect ours while we wait (a
    // finished request keeps its result, and its ID goes back). Bounded, with
    // a sleep between tries (DeviceRetry); a refusal past the bound stays
    // EAGAIN and counts as a failed operation.
    DeviceRetry retry;
    while ((s0 = gpumem_nvme_qp_submit(qp, &rd, &r0)) == GPUMEM_EAGAIN && retry.pause()) {}
    retry = DeviceRetry();
    while ((s1 = gpumem_nvme_qp_submit(qp, &fl, &r1)) == GPUMEM_EAGAIN && retry.pause())
        if (s0 == GPUMEM_OK) gpumem_nvme_qp_poll(qp, &r0);
    if (s1 == GPUMEM_OK) s1 = gpumem_nvme_qp_wait(qp, &r1);
    if (s0 == GPUMEM_OK) s0 = gpumem_nvme_qp_wait(qp, &r0);
    s1 == GPUMEM_OK ? ok++ : failed++;
    good = s0 == GPUMEM_OK;
    for (w = 0; w < WORDS; w++) good &= ((volatile uint32_t *)b1)[w] == pattern(t, w);
    good ? ok++ : failed++;
    atomicAdd(&a.counts->ok, ok);
    if (failed) atomicAdd(&a.counts->failed, failed);
}

__global__ void clients_kernel(Clients a) {
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < a.n) client_io(a, t);
}

// The clients as one phase of a fused launch (gpuctl_run.h): the workers
// grid-stride when there are more clients than threads.
struct FusedClients {
    static constexpr uint32_t kPhases = 1;
    Clients a;
    __device__ void run(uint32_t, uint32_t worker, uint32_t workers) const {
        for (uint32_t t = worker; t < a.n; t += workers) client_io(a, t);
    }
};

static int small_run = 0, fused_only = 0;

// Check the controller's counts and the namespace against n clients.
static void expect_clean(const gpumem_target_stats &s, const Counts &c, uint32_t n, const uint32_t *ns) {
    uint32_t bad = 0;
    EXPECT(c.ok == 4ull * n && c.failed == 0, "clients: %llu ok, %llu failed of %llu", c.ok, c.failed, 4ull * n);
    EXPECT(s.commands == 4ull * n && s.writes == n && s.reads == 2ull * n && s.flushes == n,
           "controller: %llu commands, %llu writes, %llu reads, %llu flushes", (unsigned long long)s.commands,
           (unsigned long long)s.writes, (unsigned long long)s.reads, (unsigned long long)s.flushes);
    EXPECT(s.violations == 0 && s.errors_other == 0, "%llu violations (cid %llu, doorbell %llu/%llu, cq %llu), %llu errors",
           (unsigned long long)s.violations, (unsigned long long)s.cid_in_flight, (unsigned long long)s.bad_doorbell,
           (unsigned long long)s.doorbell_backwards, (unsigned long long)s.cq_head_past_posted,
           (unsigned long long)s.errors_other);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t w = 0; w < WORDS; w++)
            if (ns[(size_t)i * WORDS + w] != pattern(i, w)) {
                bad++;
                break;
            }
    EXPECT(bad == 0, "%u blocks of the namespace differ", bad);
}

// ---- 1. host-thread controller: rings pinned and mapped, client state in GPU memory

static void test_host_controller() {
    // 4,096 threads: 1,024 on each pair of depth 256, so IDs and turns are
    // contended. Not 16K: 0.3.0 served GPU clients at ~280 commands/s, and
    // 16K threads' 64K commands at that rate would outlast the test's wait
    // bound; the rate against thread counts is bench_gpu's to measure.
    const uint32_t n = small_run ? 512 : 4096, pairs = 4;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl = NULL;
    gpumem_swctl_stats s;
    Clients a;
    char detail[160];
    test_begin();
    cfg.lba_bytes = LBA;
    cfg.n_blocks = n;
    // rings, doorbells, signals and namespace pinned and mapped; each pair's
    // client state in GPU memory; the controller polls, never parks
    gpumem_swctl_config_gpu_clients(&cfg);
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK) exit(1);
    CHECK(cudaHostAlloc((void **)&a.pairs, pairs * sizeof *a.pairs, cudaHostAllocMapped));
    for (uint32_t i = 0; i < pairs; i++)
        if (gpumem_swctl_add_qp_ex(ctl, 256, 1024, 0, &a.pairs[i]) != GPUMEM_OK) exit(1);
    a.n_pairs = pairs;
    a.n = n;
    CHECK(cudaHostAlloc((void **)&a.bufs, (size_t)n * 2 * LBA, cudaHostAllocMapped));
    CHECK(cudaHostAlloc((void **)&a.counts, sizeof *a.counts, cudaHostAllocMapped));
    memset(a.counts, 0, sizeof *a.counts);
    if (gpumem_swctl_start(ctl) != GPUMEM_OK) exit(1);
    {
        SwctlWatch watch(ctl, "host controller, client state in GPU memory", 20000);
        clients_kernel<<<(n + 255) / 256, 256>>>(a);
        CHECK(cudaGetLastError());
        wait_stream(0, kTestWaitS, "host controller, client state in GPU memory");
    }
    gpumem_swctl_stop(ctl);
    gpumem_swctl_get_stats(ctl, &s);
    expect_clean(s, *a.counts, n, (const uint32_t *)gpumem_swctl_ram(ctl));
    snprintf(detail, sizeof detail, "%u GPU threads, %u pairs of 256, %llu commands, %llu violations", n, pairs,
             (unsigned long long)s.commands, (unsigned long long)s.violations);
    test_end("host-thread controller, rings pinned and mapped, client state in GPU memory", detail);
    gpumem_swctl_destroy(ctl);
    cudaFreeHost(a.bufs);
    cudaFreeHost(a.counts);
    cudaFreeHost(a.pairs);
}

// ---- 2-4. the GPU-resident controller ----------------------------------------

struct GpuRun {
    const char *name;
    uint32_t clients, pairs, depth, servers;
    bool pinned_ns; // namespace in pinned host memory
    bool fused;     // cooperative launch, controller in block 0
};

__global__ void fill_namespace(uint32_t *ns, uint32_t n_blocks) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n_blocks * WORDS;
         i += (size_t)gridDim.x * blockDim.x)
        ns[i] = 0xDEADBEEFu;
}

static void run_gpu_controller(const GpuRun &r) {
    gpumem_swctl_gpu_desc d = gpumem_swctl_gpu_desc_default();
    uint32_t *control, *ns;
    void *mem;
    Clients a;
    gpumem_target_stats s;
    cudaStream_t ctl_stream, client_stream;
    char detail[200];
    bool fused = r.fused || fused_only;
    double t0;
    test_begin();
    CHECK(cudaHostAlloc((void **)&control, 2 * sizeof *control, cudaHostAllocMapped));
    if (r.pinned_ns) CHECK(cudaHostAlloc((void **)&ns, (size_t)r.clients * LBA, cudaHostAllocMapped));
    else CHECK(cudaMalloc((void **)&ns, (size_t)r.clients * LBA));
    fill_namespace<<<256, 256>>>(ns, r.clients);
    CHECK(cudaGetLastError());
    d.n_pairs = r.pairs;
    d.depth = r.depth;
    d.n_cids = r.depth;
    d.lba_bytes = LBA;
    d.n_blocks = r.clients;
    d.ram = ns;
    d.control = control;
    size_t bytes = gpumem_swctl_gpu_bytes(&d);
    CHECK(cudaMalloc(&mem, bytes));
    gpumem_status init = gpumem_swctl_gpu_init_cuda(mem, bytes, &d);
    EXPECT(init == GPUMEM_OK, "controller init: %s", gpumem_status_str(init));
    gpumem_swctl_gpu *ctl = (gpumem_swctl_gpu *)mem;
    {   // device addresses of the pairs, computed from the base
        gpumem_nvme_qp *host_list[256];
        for (uint32_t i = 0; i < r.pairs; i++) host_list[i] = gpumem_swctl_gpu_pair(mem, i);
        CHECK(cudaMalloc((void **)&a.pairs, r.pairs * sizeof *a.pairs));
        CHECK(cudaMemcpy(a.pairs, host_list, r.pairs * sizeof *a.pairs, cudaMemcpyHostToDevice));
    }
    a.n_pairs = r.pairs;
    a.n = r.clients;
    CHECK(cudaMalloc((void **)&a.bufs, (size_t)r.clients * 2 * LBA));
    CHECK(cudaMalloc((void **)&a.counts, sizeof *a.counts));
    CHECK(cudaMemset(a.counts, 0, sizeof *a.counts));
    CHECK(cudaStreamCreateWithFlags(&ctl_stream, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&client_stream, cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize()); // the last time nothing persistent runs
    t0 = wall_s();
    bool ran = false;
    if (init != GPUMEM_OK) {
        // nothing to run
    } else if (fused) {
        GpuctlWatch watch(ctl, &d, r.name, 20000);
        ran = run_fused(ctl, FusedClients{a}, r.clients, client_stream, kTestWaitS, r.name);
    } else {
        // Loads the client kernel before the controller runs (lazy loading).
        const void *clients[] = {(const void *)clients_kernel};
        ran = start_gpuctl(ctl, &d, r.servers, ctl_stream, clients, 1, r.name) == GPUMEM_OK;
        if (ran) {
            {
                GpuctlWatch watch(ctl, &d, r.name, 20000);
                clients_kernel<<<(r.clients + 255) / 256, 256, 0, client_stream>>>(a);
                CHECK(cudaGetLastError());
                wait_stream(client_stream, kTestWaitS, r.name);
            }
            stop_gpuctl(&d, ctl_stream, 30);
        }
    }
    EXPECT(ran, "the controller and its clients ran");
    double secs = wall_s() - t0;
    Counts c;
    CHECK(cudaMemcpy(&c, a.counts, sizeof c, cudaMemcpyDeviceToHost));
    EXPECT(gpumem_swctl_gpu_get_stats_cuda(ctl, &s) == GPUMEM_OK, "stats");
    uint32_t *host_ns = (uint32_t *)malloc((size_t)r.clients * LBA);
    CHECK(cudaMemcpy(host_ns, ns, (size_t)r.clients * LBA, cudaMemcpyDefault));
    if (ran) expect_clean(s, c, r.clients, host_ns);
    snprintf(detail, sizeof detail, "%u threads, %u pairs of %u, %s, %llu commands in %.2f s, %llu violations",
             r.clients, r.pairs, r.depth, fused ? "cooperative launch" : "own stream",
             (unsigned long long)s.commands, secs, (unsigned long long)s.violations);
    test_end(r.name, detail);
    free(host_ns);
    cudaStreamDestroy(ctl_stream);
    cudaStreamDestroy(client_stream);
    cudaFree(a.counts);
    cudaFree(a.bufs);
    cudaFree(a.pairs);
    cudaFree(mem);
    if (r.pinned_ns) cudaFreeHost(ns);
    else cudaFree(ns);
    cudaFreeHost(control);
}

// gpumem_swctl_gpu_start refuses what cannot run, before it launches
// anything: no threads, a partial warp above one block, a grid no device
// holds resident at once (16M threads, and the largest whole-warp count,
// where 32-bit block arithmetic would wrap), and a stream that is not
// non-blocking (stream 0, a plain cudaStreamCreate stream,
// cudaStreamPerThread: a persistent kernel there would hang every blocking
// call after it). A refused start leaves the stop word unset and the running
// count at 0 (nothing launched); a second start without a new init is
// refused as ESTATE. Then init and start each succeed right after an
// unrelated CUDA call failed: its error, left for cudaGetLastError, is not
// theirs (it used to read as a failed launch, and start returned ESYS with
// the controller running and nobody to stop it).
static void test_start_refusals(void) {
    gpumem_swctl_gpu_desc d = gpumem_swctl_gpu_desc_default();
    cudaFuncAttributes attr;
    uint32_t *control, *ns;
    void *mem;
    cudaStream_t stream;
    const void *clients[] = {(const void *)clients_kernel};
    test_begin();
    CHECK(cudaFuncGetAttributes(&attr, (const void *)gpumem_swctl_gpu_kernel<>));
    CHECK(cudaHostAlloc((void **)&control, 2 * sizeof *control, cudaHostAllocMapped));
    control[0] = control[1] = 0;
    CHECK(cudaMalloc((void **)&ns, 8 * LBA));
    d.n_pairs = 1, d.depth = 64, d.n_cids = 64, d.lba_bytes = LBA, d.n_blocks = 8, d.ram = ns, d.control = control;
    size_t bytes = gpumem_swctl_gpu_bytes(&d);
    CHECK(cudaMalloc(&mem, bytes));
    EXPECT(gpumem_swctl_gpu_init_cuda(mem, bytes, &d) == GPUMEM_OK, "controller init");
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const uint32_t asks[] = {0u, (uint32_t)attr.maxThreadsPerBlock + 1u, 1u << 24, UINT32_MAX & ~31u};
    for (uint32_t ask : asks) {
        gpumem_status st = gpumem_swctl_gpu_start((gpumem_swctl_gpu *)mem, &d, ask, stream, clients, 1, 1000);
        EXPECT(st == GPUMEM_EINVAL, "start with %u threads: %s, not EINVAL", ask, gpumem_status_str(st));
    }
    cudaStream_t blocking;
    CHECK(cudaStreamCreate(&blocking));
    const cudaStream_t blocking_streams[] = {0, blocking, cudaStreamPerThread};
    for (cudaStream_t bs : blocking_streams) {
        gpumem_status st = gpumem_swctl_gpu_start((gpumem_swctl_gpu *)mem, &d, 32, bs, clients, 1, 1000);
        EXPECT(st == GPUMEM_EINVAL, "start on blocking stream %p: %s, not EINVAL", (void *)bs, gpumem_status_str(st));
        if (st == GPUMEM_OK) { // it runs there: stop it before anything waits on the legacy stream
            stop_gpuctl(&d, bs, 30);
            control[0] = control[1] = 0;
        }
    }
    cudaStreamDestroy(blocking);
    wait_stream(stream, 10, "refused GPU controller starts (nothing should run)");
    EXPECT(control[0] == 0 && control[1] == 0, "a refused start launched or stopped something (stop %u, running %u)",
           control[0], control[1]);
    control[1] = 1; // as a controller started before would leave it
    gpumem_status again = gpumem_swctl_gpu_start((gpumem_swctl_gpu *)mem, &d, 32, stream, clients, 1, 1000);
    EXPECT(again == GPUMEM_ESTATE, "a start over a used controller: %s, not ESTATE", gpumem_status_str(again));
    control[1] = 0;
    // A failed allocation leaves cudaErrorMemoryAllocation (not sticky) for
    // the next cudaGetLastError.
    void *too_big = nullptr;
    EXPECT(cudaMalloc(&too_big, (size_t)1 << 60) != cudaSuccess, "a 2^60-byte cudaMalloc succeeded");
    gpumem_status init = gpumem_swctl_gpu_init_cuda(mem, bytes, &d);
    EXPECT(init == GPUMEM_OK, "init after a failed CUDA call: %s", gpumem_status_str(init));
    EXPECT(cudaMalloc(&too_big, (size_t)1 << 60) != cudaSuccess, "a 2^60-byte cudaMalloc succeeded");
    gpumem_status stale = gpumem_swctl_gpu_start((gpumem_swctl_gpu *)mem, &d, 32, stream, clients, 1, 10000);
    EXPECT(stale == GPUMEM_OK, "start after a failed CUDA call: %s", gpumem_status_str(stale));
    stop_gpuctl(&d, stream, 30); // a failed start stopped it already; a good one is stopped here
    char detail[200];
    snprintf(detail, sizeof detail,
             "0, %d, %u and %u threads refused (block limit %d at %d registers); blocking streams and a restart "
             "too; init and start after a failed CUDA call",
             attr.maxThreadsPerBlock + 1, 1u << 24, UINT32_MAX & ~31u, attr.maxThreadsPerBlock, attr.numRegs);
    test_end("gpumem_swctl_gpu_start refuses what cannot run", detail);
    cudaStreamDestroy(stream);
    cudaFree(mem);
    cudaFree(ns);
    cudaFreeHost(control);
}

int main(int argc, char **argv) {
    TestArgs args = parse_args(argc, argv, true);
    small_run = args.small;
    fused_only = args.fused;
    if (no_gpu("test_nvme_gpu")) return 0;
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    test_host_controller();
    const uint32_t k = small_run ? 64 : 1;
    GpuRun runs[] = {
        {"GPU controller in GPU memory, namespace in GPU memory", 65536 / k, 4, 1024, 128, false, false},
        {"GPU controller, namespace in pinned host memory, cooperative launch", 16384 / k, 2, 256, 64, true, true},
        {"GPU controller, depth 2 (every command a handoff)", 4096 / k, 1, 2, 32, false, false},
        {"GPU controller, a million client threads on 16 pairs", (1u << 20) / (k * k), 16, 1024, 128, false, false},
        // A warp per pair for 64 pairs: 2,048 threads, more than one block of
        // the controller kernel holds, so gpumem_swctl_gpu_start launches
        // several (4 of 512 at 104 registers per thread).
        {"GPU controller in several blocks (a warp per pair, 64 pairs)", 65536 / k, 64, 256, 2048, false, false},
    };
    test_start_refusals();
    for (const GpuRun &r : runs) run_gpu_controller(r);
    printf("test_nvme_gpu: %s\n", tests_failed ? "FAILED" : "all passed");
    return tests_failed ? 1 : 0;
}
