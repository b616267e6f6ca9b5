// gpumem_share.h with GPU owners: the share and the caches in managed
// memory (gpumem_share_init), the miss queue in mapped pinned host memory,
// and a host thread serving it (gpumem_share_server_start) while kernels
// run. GPU threads miss in their shared caches and are served; they write
// through gpumem_share_get / _put; one thread releases at a kernel's end
// (its host part, the host's acquire, made by the server) and acquires at
// the next kernel's start. The host reads the GPU's writes without calling
// acquire (GAIA's piggybacked host sync), a second GPU owner reads them after
// its acquire, and flushes put them in storage. Without a server a GPU
// miss is refused (ESTATE); a server that takes nothing ends it ETIMEDOUT.
// Every write and read is counted and checked by content.
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
#define GPU0 GPUMEM_SHARE_GPU0
#define GPU1 (GPUMEM_SHARE_GPU0 + 1)

struct Counts {
    unsigned long long written, read_ok, read_bad, refused, timed_out, other;
};

// Block b writes line b: each thread its words, through the share (which
// tracks the write: base, pin, consistency-dirty bit). The first get of a
// line misses: a host thread serves it.
__global__ void write_lines(gpumem_share *s, uint32_t owner, Counts *n) {
    const uint64_t line = blockIdx.x;
    void *p;
    gpumem_status st = gpumem_share_get(s, owner, line, 1, &p);
    if (st != GPUMEM_OK) {
        atomicAdd(&n->other, 1ull);
        return;
    }
    for (uint32_t w = threadIdx.x; w < WORDS_PER_LINE; w += blockDim.x)
        ((uint64_t *)p)[w] = written_word(line * WORDS_PER_LINE + w);
    if (gpumem_share_put(s, owner, line, 1) == GPUMEM_OK) atomicAdd(&n->written, 1ull);
    else atomicAdd(&n->other, 1ull);
}

// Block b reads line b through the owner's cache (the array path: a miss
// goes to the share's hook, then the queue) and checks every word.
__global__ void read_lines(gpumem_cache *c, uint64_t written, Counts *n) {
    const uint64_t line = blockIdx.x;
    void *p;
    gpumem_status st = gpumem_cache_acquire(c, line, 1, 0, &p);
    if (st == GPUMEM_ESTATE) {
        atomicAdd(&n->refused, 1ull);
        return;
    }
    if (st == GPUMEM_ETIMEDOUT) {
        atomicAdd(&n->timed_out, 1ull);
        return;
    }
    if (st != GPUMEM_OK) {
        atomicAdd(&n->other, 1ull);
        return;
    }
    unsigned long long bad = 0;
    for (uint32_t w = threadIdx.x; w < WORDS_PER_LINE; w += blockDim.x) {
        const uint64_t i = line * WORDS_PER_LINE + w;
        bad += ((uint64_t *)p)[w] != (line < written ? written_word(i) : initial_word(i));
    }
    if (bad) atomicAdd(&n->read_bad, bad);
    else atomicAdd(&n->read_ok, 1ull);
    gpumem_cache_release(c, line, 1);
}

// Kernel boundaries, on the device: one thread, after every writer (release)
// or before every reader (acquire).
__global__ void release_on_device(gpumem_share *s, uint32_t owner, uint64_t n_lines, gpumem_status *st) {
    *st = gpumem_share_release(s, owner, 0, n_lines);
}
__global__ void acquire_on_device(gpumem_share *s, uint32_t owner, uint64_t n_lines, gpumem_status *st) {
    *st = gpumem_share_acquire(s, owner, 0, n_lines);
}

struct Setup {
    Rig host;
    gpumem_cache_backing same; // the GPU owners' caches read the host's storage (members start in this order)
    Rig gpu0, gpu1;
    gpumem_share *s = nullptr;
    void *mem = nullptr, *qmem = nullptr;
    Counts *n = nullptr;
    gpumem_status *dev_st = nullptr;
    gpumem_share_server *srv = nullptr;
    Setup(uint64_t n_lines, uint64_t timeout_ns)
        : host(LINE, n_lines, (uint32_t)n_lines), same(gpumem_cache_backing_memory(host.backing)),
          gpu0(LINE, n_lines, (uint32_t)n_lines, &same), gpu1(LINE, n_lines, (uint32_t)n_lines, &same) {
        gpumem_share_desc d = gpumem_share_desc_default(4);
        d.caches[GPUMEM_SHARE_HOST] = host.cache;
        d.caches[GPU0] = gpu0.cache;
        d.caches[GPU1] = gpu1.cache;
        size_t bytes = gpumem_share_bytes(&d), qbytes = gpumem_share_queue_bytes(256);
        CHECK(cudaMallocManaged(&mem, bytes));
        CHECK(cudaMallocManaged(&n, sizeof *n));
        CHECK(cudaMallocManaged(&dev_st, sizeof *dev_st));
        CHECK(cudaHostAlloc(&qmem, qbytes, cudaHostAllocMapped));
        memset(n, 0, sizeof *n);
        EXPECT(gpumem_share_init(&d, mem, bytes, &s) == GPUMEM_OK, "share init");
        gpumem_status st = gpumem_share_queue_init(s, qmem, qbytes, 256, timeout_ns);
        EXPECT(st == GPUMEM_OK, "queue init: %s", gpumem_status_str(st));
    }
    void serve() { EXPECT(gpumem_share_server_start(s, 0, &srv) == GPUMEM_OK, "server start"); }
    void stop() {
        if (srv) EXPECT(gpumem_share_server_stop(srv) == GPUMEM_OK, "server stop");
        srv = nullptr;
    }
    ~Setup() {
        stop();
        if (s) EXPECT(gpumem_share_destroy(s) == GPUMEM_OK, "destroy");
        cudaFree(mem);
        cudaFree(n);
        cudaFree(dev_st);
        cudaFreeHost(qmem);
    }
};

static unsigned long long host_words_wrong(gpumem_share *s, uint64_t n_lines, uint64_t written) {
    unsigned long long bad = 0;
    for (uint64_t l = 0; l < n_lines; l++) {
        void *p;
        if (gpumem_share_get(s, GPUMEM_SHARE_HOST, l, 0, &p) != GPUMEM_OK) {
            bad += WORDS_PER_LINE;
            continue;
        }
        for (uint64_t w = 0; w < WORDS_PER_LINE; w++) {
            uint64_t i = l * WORDS_PER_LINE + w;
            bad += ((uint64_t *)p)[w] != (l < written ? written_word(i) : initial_word(i));
        }
        gpumem_share_put(s, GPUMEM_SHARE_HOST, l, 0);
    }
    return bad;
}

static void test_gpu_producer_host_and_gpu_consumers(bool small) {
    test_begin();
    const uint64_t n_lines = small ? 16 : 128, written = n_lines / 2;
    Setup t(n_lines, 0);
    // The host holds stale copies of every line before the GPU writes.
    EXPECT(host_words_wrong(t.s, n_lines, 0) == 0, "the host's first read");
    t.serve();
    write_lines<<<(uint32_t)written, 128>>>(t.s, GPU0, t.n);
    CHECK(cudaGetLastError());
    release_on_device<<<1, 1>>>(t.s, GPU0, n_lines, t.dev_st);
    CHECK(cudaGetLastError());
    wait_kernels(kTestWaitS, "GPU 0 writes through the share (misses served), then releases on the device");
    EXPECT(t.n->written == written && t.n->other == 0, "%llu lines written, %llu other statuses", t.n->written,
           t.n->other);
    EXPECT(*t.dev_st == GPUMEM_OK, "release on the device: %s", gpumem_status_str(*t.dev_st));
    // No acquire on the host: the server made it when GPU 0 released.
    unsigned long long bad = host_words_wrong(t.s, n_lines, written);
    EXPECT(bad == 0, "%llu words wrong on the host, which never called acquire", bad);
    // GPU 1 acquires at its kernel's start and reads everything: misses
    // served, GPU 0's writes merged on demand (already, by the host's reads).
    acquire_on_device<<<1, 1>>>(t.s, GPU1, n_lines, t.dev_st);
    CHECK(cudaGetLastError());
    read_lines<<<(uint32_t)n_lines, 128>>>(t.gpu1.cache, written, t.n);
    CHECK(cudaGetLastError());
    wait_kernels(kTestWaitS, "GPU 1 acquires on the device and reads every line (misses served)");
    EXPECT(*t.dev_st == GPUMEM_OK, "acquire on the device: %s", gpumem_status_str(*t.dev_st));
    EXPECT(t.n->read_ok == n_lines && t.n->read_bad == 0 && t.n->other == 0,
           "GPU 1: %llu lines read right, %llu words wrong, %llu other statuses", t.n->read_ok, t.n->read_bad,
           t.n->other);
    // GPU 0's acquire drops the pins the host's merges left it (owed).
    acquire_on_device<<<1, 1>>>(t.s, GPU0, n_lines, t.dev_st);
    CHECK(cudaGetLastError());
    wait_kernels(kTestWaitS, "GPU 0 acquires on the device");
    EXPECT(gpumem_cache_find_in_use(t.gpu0.cache, 0, 1) == n_lines, "GPU 0 still holds a pin after its acquire");
    gpumem_share_stats st;
    gpumem_share_get_stats(t.s, &st);
    EXPECT(st.served == written + 1 + n_lines, "served %llu (GPU 0's misses, its release, GPU 1's misses)",
           (unsigned long long)st.served);
    EXPECT(st.owed_pins == written, "owed pins %llu", (unsigned long long)st.owed_pins);
    EXPECT(st.violations == 0 && st.post_timeouts == 0, "violations %llu, timeouts %llu",
           (unsigned long long)st.violations, (unsigned long long)st.post_timeouts);
    t.stop();
    EXPECT(gpumem_share_flush(t.s, GPU0) == GPUMEM_OK, "flush GPU 0");
    bad = 0;
    for (uint64_t i = 0; i < written * WORDS_PER_LINE; i++) bad += t.host.backing[i] != written_word(i);
    EXPECT(bad == 0, "%llu words wrong in storage after the flush", bad);
    char detail[160];
    snprintf(detail, sizeof detail, "%llu lines written on GPU 0, read by the host and GPU 1, %llu requests served",
             (unsigned long long)written, (unsigned long long)st.served);
    test_end("GPU producer, host and GPU consumers, misses served by a host thread", detail);
}

static void test_gpu_miss_without_server(void) {
    test_begin();
    Setup t(16, 200000000ull); // 200 ms
    read_lines<<<4, 32>>>(t.gpu0.cache, 0, t.n);
    CHECK(cudaGetLastError());
    wait_kernels(kTestWaitS, "GPU misses with no server");
    EXPECT(t.n->refused == 4, "no server: %llu of 4 misses refused", t.n->refused);
    t.s->queue->servers = 1; // says a server runs; none does (a stuck one)
    read_lines<<<2, 32>>>(t.gpu0.cache, 0, t.n);
    CHECK(cudaGetLastError());
    wait_kernels(kTestWaitS, "GPU misses a server never takes");
    t.s->queue->servers = 0;
    EXPECT(t.n->timed_out == 2, "a stuck server: %llu of 2 misses timed out", t.n->timed_out);
    EXPECT(gpumem_cache_find_in_use(t.gpu0.cache, 0, 1) == 16, "a refused miss left a line claimed");
    t.serve();
    read_lines<<<16, 32>>>(t.gpu0.cache, 0, t.n);
    CHECK(cudaGetLastError());
    wait_kernels(kTestWaitS, "GPU misses, served");
    EXPECT(t.n->read_ok == 16 && t.n->read_bad == 0 && t.n->other == 0, "served: %llu of 16 read right",
           t.n->read_ok);
    test_end("GPU misses refused without a server, timed out with a stuck one, served with one",
             "ESTATE, ETIMEDOUT, then every line read right");
}

int main(int argc, char **argv) {
    bool small = parse_args(argc, argv, false).small;
    if (no_gpu("test_share_gpu")) return 0;
    int concurrent = 0;
    CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    if (!concurrent) {
        // The server writes GPU owners' slots (managed memory) while kernels run.
        printf("SKIP test_share_gpu: this GPU has no concurrent managed access\n");
        return 0;
    }
    test_gpu_producer_host_and_gpu_consumers(small);
    test_gpu_miss_without_server();
    return tests_failed ? 1 : 0;
}
