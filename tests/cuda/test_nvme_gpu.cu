// GPU threads drive a gpumem queue pair against the host-thread software
// controller. Every allocation of the controller (queue memory, namespace RAM)
// is pinned, mapped host memory, through the GPUMEM_MALLOC hook, so the same
// pointers work on both sides (unified virtual addressing). Each thread writes
// one block with its own pattern, reads it back and checks it by content;
// the host then checks the namespace and the controller's violation count.
//
//   make gpu-test        (runs where a GPU is present; compiled by make test)
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef __CUDA_ARCH__ /* the host shim that uses it is compiled in the host pass only */
static void *pinned_alloc(size_t n) {
    void *p = NULL;
    return cudaHostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess ? p : NULL;
}
#endif
#define GPUMEM_MALLOC(n) pinned_alloc(n)
#define GPUMEM_FREE(p) cudaFreeHost(p)
#define GPUMEM_IMPLEMENTATION
#include "gpumem_nvme.h"

#define LBA 512u
#include "cuda_check.h"

__device__ uint32_t pattern(uint32_t lba, uint32_t word) { return lba * 2654435761u ^ word; }

__global__ void write_read(gpumem_nvme_qp *qp, uint32_t *bufs, uint32_t n, unsigned long long *ok,
                           unsigned long long *failed) {
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x, w;
    uint32_t *mine = bufs + (size_t)t * (LBA / 4);
    int good = 1;
    if (t >= n) return;
    for (w = 0; w < LBA / 4; w++) mine[w] = pattern(t, w);
    __threadfence_system(); /* the data before the command that carries it */
    if (gpumem_nvme_qp_write(qp, t, 1, (uint64_t)(uintptr_t)mine, 0, NULL) != GPUMEM_OK) good = 0;
    for (w = 0; w < LBA / 4; w++) mine[w] = 0;
    __threadfence_system();
    if (gpumem_nvme_qp_read(qp, t, 1, (uint64_t)(uintptr_t)mine, 0, NULL) != GPUMEM_OK) good = 0;
    for (w = 0; w < LBA / 4; w++) good &= (((volatile uint32_t *)mine)[w] == pattern(t, w));
    atomicAdd(good ? ok : failed, 1ull);
}

int main(int argc, char **argv) {
    uint32_t n = argc > 1 ? (uint32_t)atoi(argv[1]) : 16384, depth = 1024, i, w, bad = 0;
    int devices = 0;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    gpumem_swctl_stats s;
    uint32_t *bufs;
    unsigned long long *counts;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("test_nvme_gpu: no CUDA device; skipped\n");
        return 0;
    }
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    cfg.lba_bytes = LBA;
    cfg.n_blocks = n;
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK || gpumem_swctl_add_qp(ctl, depth, &qp) != GPUMEM_OK) return 1;
    CHECK(cudaHostAlloc((void **)&bufs, (size_t)n * LBA, cudaHostAllocMapped));
    CHECK(cudaHostAlloc((void **)&counts, 2 * sizeof *counts, cudaHostAllocMapped));
    counts[0] = counts[1] = 0;
    gpumem_swctl_start(ctl);
    write_read<<<(n + 255) / 256, 256>>>(qp, bufs, n, &counts[0], &counts[1]);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    gpumem_swctl_stop(ctl);
    gpumem_swctl_get_stats(ctl, &s);
    for (i = 0; i < n; i++)
        for (w = 0; w < LBA / 4; w++)
            if (((uint32_t *)gpumem_swctl_ram(ctl))[(size_t)i * (LBA / 4) + w] != (i * 2654435761u ^ w)) {
                bad++;
                break;
            }
    printf("test_nvme_gpu: %u GPU threads, %llu ok, %llu failed, %lu commands, %lu violations, %u bad blocks\n", n,
           counts[0], counts[1], (unsigned long)s.commands, (unsigned long)s.violations, bad);
    gpumem_swctl_destroy(ctl);
    return (counts[0] == n && counts[1] == 0 && s.commands == 2ull * n && s.violations == 0 && bad == 0) ? 0 : 1;
}
