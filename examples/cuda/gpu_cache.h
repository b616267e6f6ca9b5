// A gpumem cache placed for GPU threads served by the host-thread
// controller, for the CUDA examples: gpu_cache_create / gpu_cache_destroy,
// called like gpumem_cache_create / gpumem_cache_destroy.
//
// The cache object and its metadata - line states, reference counts, the
// slot policy's words: what every client warp updates atomically - are in
// managed memory, which the GPU's atomics use in GPU memory once it has
// touched them. In pinned host memory (what gpumem_cache_create gives under
// cuda_host.h's GPUMEM_MALLOC) every such atomic crosses PCIe, and contended
// client state across PCIe is what collapsed the host-controller runs on an
// H100 (docs/gpu.md). The slots and PRP lists stay pinned and
// mapped (cudaHostAlloc): the controller's host thread writes the lines it
// reads into them. The initialisation runs on the host, before any kernel.
//
// Include after cuda_host.h, with GPUMEM_IMPLEMENTATION defined.
#ifndef GPUMEM_EXAMPLES_CUDA_GPU_CACHE_H
#define GPUMEM_EXAMPLES_CUDA_GPU_CACHE_H
#include "gpumem_cache.h"

// The managed block: the cache object first (so the cache pointer is the
// block), then what to free, then (on a page) the metadata.
struct gpu_cache_block {
    gpumem_cache cache;
    void *pinned; // the slots and PRP lists (cudaHostAlloc, mapped)
};

static gpumem_status gpu_cache_create(const gpumem_cache_desc *d, gpumem_cache **out) {
    const size_t pg = GPUMEM_NVME_PAGE_BYTES;
    gpumem_cache_desc e = *d;
    gpu_cache_block *b = nullptr;
    gpumem_status st;
    *out = nullptr;
    e.meta_bytes = gpumem_cache_meta_bytes(&e);
    const size_t head = GPUMEM_ALIGN_UP(sizeof(gpu_cache_block), pg);
    const size_t data = GPUMEM_ALIGN_UP((size_t)e.n_slots * e.line_bytes, pg);
    const size_t prp = gpumem_cache_prp_bytes(e.line_bytes, e.n_slots, e.backing.kind);
    if (cudaMallocManaged((void **)&b, head + e.meta_bytes) != cudaSuccess) return GPUMEM_ENOMEM;
    if (cudaHostAlloc(&b->pinned, data + prp + pg, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
        cudaFree(b);
        return GPUMEM_ENOMEM;
    }
    e.meta = (unsigned char *)b + head;
    e.data = (void *)GPUMEM_ALIGN_UP((uintptr_t)b->pinned, pg); // slots start on a page
    e.prp_lists = prp ? (uint64_t *)(void *)((unsigned char *)e.data + data) : nullptr;
    if ((st = gpumem_cache_init(&b->cache, &e)) != GPUMEM_OK) {
        cudaFreeHost(b->pinned);
        cudaFree(b);
        return st;
    }
    *out = &b->cache;
    return GPUMEM_OK;
}

// Free it, with no kernel running. Unlike gpumem_cache_destroy it cannot
// write back: the pairs' client state is in GPU memory, so only GPU threads
// can drive them (a cache that was written to is flushed by a GPU thread
// first, gpumem_cache_flush on the device; the examples only read). So, as
// gpumem_cache_destroy does when it cannot write back, it refuses with
// GPUMEM_EBUSY, freeing nothing, while any line is dirty or held: a write
// is never dropped.
static gpumem_status gpu_cache_destroy(gpumem_cache *c) {
    if (!c) return GPUMEM_ENULL;
    const uint64_t line = gpumem_cache_find_in_use(c, 0, 1);
    if (line < c->n_lines) {
        fprintf(stderr, "gpu_cache_destroy: line %llu is dirty or held: flush it on the GPU first\n",
                (unsigned long long)line);
        return GPUMEM_EBUSY;
    }
    gpu_cache_block *b = (gpu_cache_block *)(void *)c;
    cudaFreeHost(b->pinned);
    cudaFree(b);
    return GPUMEM_OK;
}
#endif
