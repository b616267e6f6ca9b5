// array_sum, on the GPU: a file-backed data set of 64-bit values, eight times
// the cache, summed by GPU warps through the cache, its queue pairs and the
// software controller (a host thread reading the file). All 32 lanes of a
// warp read the same line together, so warp coalescing turns them into one
// acquire and at most one read. Checked value by value and against the sum
// computed on the host. The host version is examples/array_sum.c.
//
//   make gpu-examples, or build/cuda/examples/array_sum [MiB]   (needs a GPU)
#define _POSIX_C_SOURCE 200809L
#include "cuda_host.h"
#define GPUMEM_IMPLEMENTATION
#include <fcntl.h>
#include <unistd.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "gpu_cache.h" // the cache's contended metadata in GPU (managed) memory
#include "tests/cuda/watch.h" // a stalled run reports and exits instead of hanging

#define LINE 4096u
#define WORDS_PER_LINE (LINE / 8)

__host__ __device__ uint64_t value_at(uint64_t i) { return i * 2654435761u ^ (i >> 3); }

struct sums {
    unsigned long long sum, wrong, errors;
};

__global__ void sum_lines(const gpumem_cache_array *a, uint64_t n_lines, sums *out) {
    uint64_t warp = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32, n_warps = gridDim.x * (uint64_t)blockDim.x / 32;
    uint32_t lane = threadIdx.x % 32;
    unsigned long long sum = 0, wrong = 0, errors = 0;
    gpumem_cache_ref r = gpumem_cache_ref_make(a);
    for (uint64_t line = warp; line < n_lines; line += n_warps)
        for (uint64_t w = line * WORDS_PER_LINE + lane; w < (line + 1) * WORDS_PER_LINE; w += 32) {
            uint64_t v = 0;
            gpumem_status st;
            DeviceRetry retry; // full: this lane holds nothing; sleep between tries, give up after a bound
            while ((st = gpumem_cache_ref_get(&r, w, &v)) == GPUMEM_EAGAIN && retry.pause()) {}
            if (st != GPUMEM_OK) {
                errors++;
                continue;
            }
            wrong += v != value_at(w);
            sum += v;
        }
    if (gpumem_cache_ref_drop(&r) != GPUMEM_OK) errors++;
    atomicAdd(&out->sum, sum);
    atomicAdd(&out->wrong, wrong);
    atomicAdd(&out->errors, errors);
}

int main(int argc, char **argv) {
    const char *path = "build/array_sum_gpu.img";
    uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 256, n_lines = mib * 1048576 / LINE, i, expect = 0;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_nvme_qp *pairs[4];
    gpumem_swctl *ctl;
    gpumem_cache *cache;
    gpumem_cache_array *arr;
    gpumem_cache_stats cs;
    gpumem_swctl_stats s;
    sums *out;
    uint64_t *chunk;
    cudaEvent_t t0, t1;
    float ms = 0;
    int fd, ok;
    if (mib == 0 || mib > (1u << 20)) {
        fprintf(stderr, "usage: %s [MiB, 1..1048576]\n", argv[0]);
        return 2;
    }
    need_gpu("array_sum");
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    chunk = (uint64_t *)malloc(LINE * 256);
    if (fd < 0 || !chunk) {
        perror(path);
        return 1;
    }
    for (i = 0; i < n_lines * WORDS_PER_LINE; i++) { // the data set, written by the host
        chunk[i % (WORDS_PER_LINE * 256)] = value_at(i);
        expect += value_at(i);
        if ((i + 1) % (WORDS_PER_LINE * 256) == 0 || i + 1 == n_lines * WORDS_PER_LINE) {
            size_t bytes = (size_t)(i % (WORDS_PER_LINE * 256) + 1) * 8;
            if (pwrite(fd, chunk, bytes, (off_t)((i + 1) * 8 - bytes)) != (ssize_t)bytes) {
                perror(path);
                return 1;
            }
        }
    }
    free(chunk);
    // GPU threads drive the pairs: rings pinned and mapped, their client state
    // in GPU memory, a controller that never parks (GPU threads cannot wake it)
    gpumem_swctl_config_gpu_clients(&cfg);
    cfg.lba_bytes = LINE;
    cfg.n_blocks = n_lines;
    cfg.fd = fd;
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK) return 1;
    for (i = 0; i < 4; i++)
        if (gpumem_swctl_add_qp(ctl, 256, &pairs[i]) != GPUMEM_OK) return 1;
    d.n_lines = n_lines;
    d.line_bytes = LINE;
    d.n_slots = (uint32_t)(n_lines / 8 > 64 ? n_lines / 8 : 64);
    {
        gpumem_nvme_ns ns = gpumem_swctl_ns(ctl);
        d.backing = gpumem_cache_backing_nvme(pairs, 1, 4, &ns, 0, GPUMEM_CACHE_STRIPE);
    }
    if (gpu_cache_create(&d, &cache) != GPUMEM_OK) {
        fprintf(stderr, "array_sum: cache of %u lines: failed\n", d.n_slots);
        return 1;
    }
    CHECK(cudaMallocManaged(&arr, sizeof *arr));
    *arr = gpumem_cache_array_make(cache, 8, 0, n_lines * WORDS_PER_LINE);
    CHECK(cudaMallocManaged(&out, sizeof *out));
    memset(out, 0, sizeof *out);
    if (gpumem_swctl_start(ctl) != GPUMEM_OK) {
        fprintf(stderr, "array_sum: the controller did not start\n");
        return 1;
    }
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    {   // one line per warp in flight, no more warps than slots
        uint32_t warps = d.n_slots < 4096 ? d.n_slots : 4096;
        SwctlWatch watch(ctl, "array_sum", 30000);
        CHECK(cudaEventRecord(t0));
        sum_lines<<<(warps + 7) / 8, 256>>>(arr, n_lines, out);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(t1));
        wait_kernels(240, "array_sum");
        CHECK(cudaEventElapsedTime(&ms, t0, t1));
    }
    gpumem_swctl_stop(ctl);
    gpumem_swctl_get_stats(ctl, &s);
    gpumem_cache_get_stats(cache, &cs);
    printf("array_sum: %llu MiB through a %.1f MiB cache in %.1f ms (%.0f MiB/s); %llu lines read, amplification %.3f\n",
           (unsigned long long)mib, (double)d.n_slots * LINE / 1048576.0, ms, (double)mib / (ms / 1000.0),
           (unsigned long long)cs.fills, (double)cs.bytes_read / ((double)n_lines * LINE));
    printf("array_sum: sum %016llx, host %016llx; %llu values wrong, %llu errors, %llu protocol violations\n",
           out->sum, (unsigned long long)expect, out->wrong, out->errors, (unsigned long long)s.violations);
    ok = out->sum == expect && out->wrong == 0 && out->errors == 0 && s.violations == 0;
    if (gpu_cache_destroy(cache) != GPUMEM_OK) ok = 0; // refused: a line dirty or held after the run
    gpumem_swctl_destroy(ctl);
    close(fd);
    unlink(path);
    printf("array_sum: %s\n", ok ? "ok" : "FAILED");
    return !ok;
}
