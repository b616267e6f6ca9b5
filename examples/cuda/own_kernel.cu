// own_kernel: your own kernel reading and writing a data set on storage
// through a gpumem cache, start to finish (docs/cuda.md walks through it).
// The data set is a file of 4-byte floats served by the host-thread software
// controller; a kernel reads element i through gpumem::cache_array_ref<float>,
// writes 2 x + 1 to element n + i (the second half of the file) through
// another, and a second kernel flushes the dirty lines from the GPU. The host
// then reads the file back and checks every output value, which is the proof
// that the flush wrote everything. The host version is examples/own_kernel.c.
//
//   make gpu-examples, or build/cuda/examples/own_kernel [MiB]   (needs a GPU)
#define _POSIX_C_SOURCE 200809L
#include "cuda_host.h" // first: the host shims' allocations become pinned, mapped host memory
#define GPUMEM_IMPLEMENTATION
#include <fcntl.h>
#include <unistd.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "gpu_cache.h"        // the cache's metadata in managed memory, its slots pinned (memory placement)
#include "examples/own_kernel.h" // the data set and the sizing, shared with the host version
#include "tests/cuda/watch.h" // a stalled run reports and exits instead of hanging

struct counts {
    unsigned long long done, eagain, errors;
};

// out[i] = 2 in[i] + 1 for i in [0, n), grid-stride. Each reference keeps
// the line it last used (one acquire per line, not per element; the lanes of
// a warp reading one line acquire it once together). On EAGAIN the refused
// reference holds nothing, but the other one still holds its line: drop it
// too before waiting, or threads that each hold a line while waiting for a
// slot can fill the cache with lines nobody will release.
__global__ void scale(const gpumem_cache_array *in, const gpumem_cache_array *out, uint64_t n, counts *c) {
    gpumem::cache_array_ref<float> src(in), dst(out);
    unsigned long long done = 0, eagain = 0, errors = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += gridDim.x * (uint64_t)blockDim.x) {
        float x = 0;
        gpumem_status st;
        DeviceRetry r1, r2; // tests/cuda/cuda_check.h: sleep 32 ns doubling to 4 us between tries, give up after 30 s
        while ((x = src.get(i), st = src.status()) == GPUMEM_EAGAIN && r1.pause()) {
            eagain++;
            gpumem_cache_ref_drop(&dst.r); // hold nothing while waiting
        }
        if (st == GPUMEM_OK) {
            while ((st = dst.set(i, own_output(x))) == GPUMEM_EAGAIN && r2.pause()) {
                eagain++;
                gpumem_cache_ref_drop(&src.r);
            }
        }
        if (st == GPUMEM_OK) done++;
        else errors++;
    }
    atomicAdd(&c->done, done);
    atomicAdd(&c->eagain, eagain);
    atomicAdd(&c->errors, errors);
} // the references' destructors release their lines (a written line stays dirty in the cache)

// Write the dirty lines back from the GPU: the pairs' client state is in GPU
// memory (gpumem_swctl_config_gpu_clients), so only GPU threads can drive
// them, and a host gpumem_cache_flush would not work. Each thread of one
// block writes back its share of the slots; then one thread calls
// gpumem_cache_flush, which finds them clean and sends each controller a
// Flush (durable). Launched after `scale` has finished: nothing holds a line.
__global__ void flush(gpumem_cache *c, int *status, unsigned long long *written) {
    const uint32_t per = (c->n_slots + blockDim.x - 1) / blockDim.x;
    const uint32_t first = threadIdx.x * per < c->n_slots ? threadIdx.x * per : c->n_slots;
    const uint32_t end = first + per < c->n_slots ? first + per : c->n_slots;
    uint64_t w = 0;
    gpumem_status st = gpumem_cache_writeback(c, first, end, &w);
    atomicAdd(written, (unsigned long long)w);
    if (st != GPUMEM_OK) atomicExch(status, (int)st);
    __syncthreads();
    if (threadIdx.x == 0 && *status == GPUMEM_OK) *status = (int)gpumem_cache_flush(c, NULL);
}

int main(int argc, char **argv) {
    const char *path = "build/own_kernel_gpu.img";
    const uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_nvme_qp *pairs[OWN_PAIRS];
    gpumem_swctl *ctl;
    gpumem_cache *cache;
    gpumem_cache_array *in, *out;
    gpumem_swctl_stats s;
    counts *c;
    int *flush_status;
    unsigned long long *written;
    cudaDeviceProp p;
    int blocks_per_sm = 0, fd, ok;
    if (mib == 0 || mib > (1u << 16)) {
        fprintf(stderr, "usage: %s [MiB of input, 1..65536]\n", argv[0]);
        return 2;
    }
    const uint64_t n = mib * 1048576 / 4, n_lines = 2 * n * 4 / OWN_LINE; // input, then output
    need_gpu("own_kernel");
    if ((fd = own_write_input(path, n)) < 0) return 1;

    // 1. The controller: a host thread serving the file to GPU threads. The
    //    pairs' rings are pinned and mapped, their client state in GPU memory.
    gpumem_swctl_config_gpu_clients(&cfg);
    cfg.lba_bytes = OWN_LINE;
    cfg.n_blocks = n_lines;
    cfg.fd = fd;
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK) return 1;
    for (int k = 0; k < OWN_PAIRS; k++)
        if (gpumem_swctl_add_qp(ctl, 256, &pairs[k]) != GPUMEM_OK) return 1;

    // 2. Slots against resident warps: a warp holds at most two lines at once
    //    (its input's and its output's), so 2 slots per resident warp never
    //    leave a warp without one; the grid is no larger than what is resident.
    CHECK(cudaGetDeviceProperties(&p, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, scale, OWN_BLOCK, 0));
    const uint64_t resident_warps = (uint64_t)blocks_per_sm * p.multiProcessorCount * (OWN_BLOCK / 32);
    d.n_lines = n_lines;
    d.line_bytes = OWN_LINE;
    d.n_slots = own_slots(resident_warps, n_lines);
    gpumem_nvme_ns ns = gpumem_swctl_ns(ctl);
    d.backing = gpumem_cache_backing_nvme(pairs, 1, OWN_PAIRS, &ns, 0, GPUMEM_CACHE_STRIPE);
    if (gpu_cache_create(&d, &cache) != GPUMEM_OK) {
        fprintf(stderr, "own_kernel: a cache of %u lines: failed\n", d.n_slots);
        return 1;
    }
    // 3. The array views: the kernel reads them, so they live in GPU-readable (managed) memory.
    CHECK(cudaMallocManaged(&in, sizeof *in));
    CHECK(cudaMallocManaged(&out, sizeof *out));
    *in = gpumem_cache_array_make(cache, 4, 0, n);
    *out = gpumem_cache_array_make(cache, 4, n * 4, n);
    CHECK(cudaMallocManaged(&c, sizeof *c));
    CHECK(cudaMallocManaged(&flush_status, sizeof *flush_status));
    CHECK(cudaMallocManaged(&written, sizeof *written));
    memset(c, 0, sizeof *c);
    *flush_status = GPUMEM_OK;
    *written = 0;
    if (gpumem_swctl_start(ctl) != GPUMEM_OK) {
        fprintf(stderr, "own_kernel: the controller did not start\n");
        return 1;
    }
    printf("own_kernel: %llu floats in, %llu out; %u slots for %llu resident warps (%d blocks of %u on each of %d SMs)\n",
           (unsigned long long)n, (unsigned long long)n, d.n_slots, (unsigned long long)resident_warps, blocks_per_sm,
           OWN_BLOCK, p.multiProcessorCount);
    {
        SwctlWatch watch(ctl, "own_kernel", 30000);
        scale<<<blocks_per_sm * p.multiProcessorCount, OWN_BLOCK>>>(in, out, n, c);
        CHECK(cudaGetLastError());
        wait_kernels(240, "own_kernel: scale");
        flush<<<1, 256>>>(cache, flush_status, written); // 4. flush from the device
        CHECK(cudaGetLastError());
        wait_kernels(240, "own_kernel: flush");
    }
    gpumem_swctl_stop(ctl);
    gpumem_swctl_get_stats(ctl, &s);
    printf("own_kernel: %llu elements done, %llu EAGAIN retries, %llu errors; flush: %s, %llu lines written;"
           " %llu protocol violations\n", c->done, c->eagain, c->errors,
           gpumem_status_str((gpumem_status)*flush_status), *written, (unsigned long long)s.violations);
    // 5. The file holds every output value: the flush wrote them all.
    uint64_t wrong = own_check_output(fd, n);
    ok = c->done == n && c->errors == 0 && *flush_status == GPUMEM_OK && s.violations == 0 && wrong == 0;
    if (gpu_cache_destroy(cache) != GPUMEM_OK) ok = 0; // refused: a line still dirty or held
    gpumem_swctl_destroy(ctl);
    close(fd);
    unlink(path);
    printf("own_kernel: %llu output values wrong in the file; %s\n", (unsigned long long)wrong, ok ? "ok" : "FAILED");
    return !ok;
}
