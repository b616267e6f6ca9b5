// Host-side helpers shared by the CUDA examples: every allocation gpumem's
// host shims make (the software controller's queues, the cache's metadata and
// slots) becomes pinned, mapped host memory through the GPUMEM_MALLOC hook, so
// the same pointers work on the GPU (unified virtual addressing) and in the
// controller's host thread. Include before any gpumem header.
//
// Slots in host memory are read by the GPU across PCIe: correct everywhere,
// not fast. Slots in GPU memory need a controller that can write there (a
// real SSD through GPUDirect, or a GPU-resident controller).
#ifndef GPUMEM_EXAMPLES_CUDA_HOST_H
#define GPUMEM_EXAMPLES_CUDA_HOST_H
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef __CUDA_ARCH__ /* the host shims that use it are compiled in the host pass only */
static void *pinned_alloc(size_t n) {
    void *p = NULL;
    return cudaHostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess ? p : NULL;
}
#endif
#define GPUMEM_MALLOC(n) pinned_alloc(n)
#define GPUMEM_FREE(p) cudaFreeHost(p)

#include "tests/cuda/cuda_check.h" // CHECK(cudaCall): exit with the call and its error

// Exit (status 1) with a plain message where there is no GPU, or where CUDA
// fails (no_gpu says which); set up mapped memory.
static void need_gpu(const char *program) {
    cudaDeviceProp p;
    if (no_gpu(program)) {
        fprintf(stderr, "%s: needs a GPU; the host version (build/%s) runs anywhere\n", program, program);
        exit(1);
    }
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    CHECK(cudaGetDeviceProperties(&p, 0));
    printf("%s on %s\n", program, p.name);
}
#endif
