// gpumem_policy.h on the device: the same trace driven through every policy
// kind by one GPU thread and by the host, over the same managed memory
// layout; the victim sequences must be equal (the device path allocates
// nothing and calls nothing indirectly, so it is the host code compiled for
// the GPU). Also GMT placement and the prefetchers from device code. The
// cache under each slot policy on the GPU is in test_cache_gpu.cu (test 3).
//
//   make gpu-test        (runs where a GPU is present; compiled by make test)
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_policy.h"

#include "cuda_check.h"

#define SLOTS 32u
#define LINES 256u
#define ACCESSES 4096u

// Demand paging of a pseudo-random trace with some loops through policy p;
// victims[i] is the i-th evicted line. Host and device.
GPUMEM_HD static uint32_t drive(gpumem_policy *p, uint32_t *slot_of, uint64_t *line_of, uint64_t *victims) {
    uint32_t used = 0, n_victims = 0;
    uint64_t rng = 0x1234567ull;
    for (uint32_t i = 0; i < LINES; i++) slot_of[i] = GPUMEM_POLICY_NONE;
    for (uint32_t i = 0; i < ACCESSES; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        uint32_t line = (i / 512) % 2 ? (uint32_t)(rng % LINES) : i % 48; // loop, random, loop, ...
        uint32_t k = slot_of[line];
        if (k != GPUMEM_POLICY_NONE) {
            gpumem_policy_on_access(p, k, line);
            continue;
        }
        if (used < SLOTS) {
            k = used++;
        } else {
            k = gpumem_policy_victim(p, (const uint8_t *)0);
            if (k == GPUMEM_POLICY_NONE) return UINT32_MAX;
            victims[n_victims++] = line_of[k];
            gpumem_policy_on_evict(p, k, line_of[k]);
            slot_of[line_of[k]] = GPUMEM_POLICY_NONE;
        }
        slot_of[line] = k;
        line_of[k] = line;
        gpumem_policy_on_fill(p, k, line);
    }
    return n_victims;
}

struct Run {
    gpumem_policy p;
    uint32_t slot_of[LINES];
    uint64_t line_of[SLOTS];
    uint64_t victims[ACCESSES];
    uint32_t n;
};

__global__ void drive_kernel(Run *r) { r->n = drive(&r->p, r->slot_of, r->line_of, r->victims); }

static void test_same_victims(uint32_t kind) {
    test_begin();
    gpumem_policy_desc d = gpumem_policy_desc_default(kind, SLOTS);
    Run *dev, host;
    void *mem_dev, *mem_host;
    size_t bytes = gpumem_policy_bytes(&d);
    CHECK(cudaMallocManaged(&dev, sizeof *dev));
    CHECK(cudaMallocManaged(&mem_dev, bytes + 8));
    mem_host = malloc(bytes + 8);
    EXPECT(gpumem_policy_init(&dev->p, &d, mem_dev) == GPUMEM_OK, "init (device memory)");
    EXPECT(gpumem_policy_init(&host.p, &d, mem_host) == GPUMEM_OK, "init (host memory)");
    drive_kernel<<<1, 1>>>(dev);
    CHECK(cudaGetLastError());
    wait_kernels(60, "same victims on device and host");
    host.n = drive(&host.p, host.slot_of, host.line_of, host.victims);
    EXPECT(dev->n == host.n && host.n != UINT32_MAX, "device %u victims, host %u", dev->n, host.n);
    uint32_t same = 0;
    for (uint32_t i = 0; i < host.n && i < dev->n; i++) same += dev->victims[i] == host.victims[i];
    EXPECT(same == host.n, "%u of %u victims equal", same, host.n);
    char detail[120];
    snprintf(detail, sizeof detail, "%s: %u victims", gpumem_policy_name(kind), host.n);
    test_end("same victims on device and host", detail);
    cudaFree(dev);
    cudaFree(mem_dev);
    free(mem_host);
}

// GMT placement and the prefetchers from a GPU thread.
__global__ void gmt_kernel(gpumem_policy_gmt *g, gpumem_policy_readahead *ra, uint32_t *out) {
    gpumem_policy_gmt_set_model(g, 1.0, 0.0);
    out[0] = gpumem_policy_gmt_place(g, 5, 100, 4); // no history: host
    gpumem_policy_gmt_on_fetch(g, 5, 105);          // RRD 5 < tier 1: should have stayed
    out[1] = gpumem_policy_gmt_place(g, 5, 200, 4); // keep
    uint64_t first;
    uint32_t count;
    gpumem_policy_readahead_init(ra, 4, 16);
    gpumem_policy_readahead_on_miss(ra, 100, &first, &count);
    gpumem_policy_readahead_on_miss(ra, 101, &first, &count);
    out[2] = count; // 8
    // A scrambled batch of GPU misses: sorted, one stream, 16 lines ahead.
    gpumem_policy_ra_batch rb;
    gpumem_policy_ra_span span;
    uint64_t batch[8] = {7, 3, 0, 5, 1, 6, 2, 4};
    gpumem_policy_ra_batch_init(&rb, 1u << 20, 4096, GPUMEM_POLICY_RA_GPU_CAP);
    out[3] = gpumem_policy_ra_batch_on_misses(&rb, batch, 8, &span, 1) == 1 && span.first == 8 ? span.count : 0;
}

static void test_gmt_on_device() {
    test_begin();
    gpumem_policy_gmt_desc d = gpumem_policy_gmt_desc_default(16, 10, 20);
    gpumem_policy_gmt *g;
    gpumem_policy_readahead *ra;
    uint32_t *out;
    void *mem;
    CHECK(cudaMallocManaged(&g, sizeof *g));
    CHECK(cudaMallocManaged(&ra, sizeof *ra));
    CHECK(cudaMallocManaged(&out, 4 * sizeof *out));
    CHECK(cudaMallocManaged(&mem, gpumem_policy_gmt_bytes(&d)));
    EXPECT(gpumem_policy_gmt_init(g, &d, mem) == GPUMEM_OK, "init");
    gmt_kernel<<<1, 1>>>(g, ra, out);
    CHECK(cudaGetLastError());
    wait_kernels(60, "GMT placement and readahead on the device");
    EXPECT(out[0] == GPUMEM_PLACE_HOST, "first placement %u", out[0]);
    EXPECT(out[1] == GPUMEM_PLACE_KEEP, "short reuse placement %u", out[1]);
    EXPECT(out[2] == 8, "readahead %u lines", out[2]);
    EXPECT(out[3] == 16, "batch readahead %u lines from line 8", out[3]);
    test_end("GMT placement and readahead on the device", "");
    cudaFree(g);
    cudaFree(ra);
    cudaFree(out);
    cudaFree(mem);
}

int main(int argc, char **argv) {
    parse_args(argc, argv, false); // --small changes nothing: one GPU thread, a 4096-access trace
    if (no_gpu("test_policy_gpu")) return 0;
    for (uint32_t kind = GPUMEM_POLICY_FIRST; kind < GPUMEM_POLICY_KINDS; kind++) test_same_victims(kind);
    test_gmt_on_device();
    printf("test_policy_gpu: %s\n", tests_failed ? "FAILED" : "all passed");
    return tests_failed ? 1 : 0;
}
