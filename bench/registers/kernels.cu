// SPDX-License-Identifier: MIT
// One kernel around each public device entry point, compiled (never run) by
// `make registers` with -Xptxas -v to report registers per thread on sm_90
// (tools/registers.sh turns the report into bench/results/registers-*.md).
// A kernel per entry point, each as small as a caller could write it, so that
// the count is the entry point's own.
#include "gpumem_cache.h"
#include "gpumem_share.h"
#include "gpumem_swctl.h"

// The cache: read one element through a warp-coalesced acquire/release.
__global__ void reg_cache_read_element(gpumem_cache *c, uint64_t line, uint32_t word, uint64_t *out) {
    void *p = NULL;
    if (gpumem_cache_acquire_coalesced(c, line, 0, &p) != GPUMEM_OK) return;
    out[threadIdx.x] = ((const uint64_t *)p)[word];
    gpumem_cache_release_coalesced(c, line);
}

// The same read with a next-use hint for the line first (issue 43), warp-coalesced.
__global__ void reg_cache_hint_read(gpumem_cache *c, uint64_t line, uint32_t word, uint64_t when, uint64_t *out) {
    void *p = NULL;
    (void)gpumem_cache_hint_coalesced(c, line, when);
    if (gpumem_cache_acquire_coalesced(c, line, 0, &p) != GPUMEM_OK) return;
    out[threadIdx.x] = ((const uint64_t *)p)[word];
    gpumem_cache_release_coalesced(c, line);
}

// The array view: one element through a reference (acquire, load, keep the line).
__global__ void reg_cache_ref_get(const gpumem_cache_array *a, uint64_t i, uint64_t *out) {
    gpumem_cache_ref r = gpumem_cache_ref_make(a);
    uint64_t v = 0;
    gpumem_cache_ref_get(&r, i, &v);
    gpumem_cache_ref_drop(&r);
    out[threadIdx.x] = v;
}

// The queue: one blocking read (take an ID, submit, wait for the completion).
__global__ void reg_qp_read(gpumem_nvme_qp *qp, uint64_t slba, uint64_t prp1, gpumem_nvme_cpl *out) {
    gpumem_nvme_cpl cpl;
    if (gpumem_nvme_qp_read(qp, slba, 1, prp1, 0, &cpl) == GPUMEM_OK) out[threadIdx.x] = cpl;
}

// The queue: one blocking read into a buffer (PRPs built from its address).
__global__ void reg_qp_read_buf(gpumem_nvme_qp *qp, uint64_t slba, void *buf, gpumem_nvme_cpl *out) {
    gpumem_nvme_cpl cpl;
    if (gpumem_nvme_qp_read_buf(qp, slba, 1, buf, &cpl) == GPUMEM_OK) out[threadIdx.x] = cpl;
}

// The queue: an asynchronous submission.
__global__ void reg_qp_submit(gpumem_nvme_qp *qp, const gpumem_nvme_cmd *cmd, gpumem_nvme_req *reqs) {
    gpumem_nvme_qp_submit(qp, cmd, &reqs[threadIdx.x]);
}

// The queue: one poll of an asynchronous request.
__global__ void reg_qp_poll(gpumem_nvme_qp *qp, gpumem_nvme_req *reqs, uint32_t *out) {
    out[threadIdx.x] = (uint32_t)gpumem_nvme_qp_poll(qp, &reqs[threadIdx.x]);
}

// The GPU-resident controller's serving loop.
__global__ void reg_gpuctl_serve(gpumem_swctl_gpu *c) {
    gpumem_swctl_gpu_serve(c, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}

// The share: one write through a shared cache (get to write, a word, put);
// a miss is posted to the miss queue's host server.
__global__ void reg_share_write(gpumem_share *s, uint32_t owner, uint64_t line, const uint64_t *in) {
    void *p = NULL;
    if (gpumem_share_get(s, owner, line, 1, &p) != GPUMEM_OK) return;
    ((uint64_t *)p)[threadIdx.x] = in[threadIdx.x];
    gpumem_share_put(s, owner, line, 1);
}

// The share: a GPU owner's release and acquire at kernel boundaries (one
// thread each; the release's host part is posted to the server).
__global__ void reg_share_release(gpumem_share *s, uint32_t owner, uint64_t n, gpumem_status *out) {
    *out = gpumem_share_release(s, owner, 0, n);
}
__global__ void reg_share_acquire(gpumem_share *s, uint32_t owner, uint64_t n, gpumem_status *out) {
    *out = gpumem_share_acquire(s, owner, 0, n);
}
