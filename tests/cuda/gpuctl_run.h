// Running a GPU-resident controller (gpumem_swctl_gpu) for the CUDA tests
// and benchmarks, the two ways they run one:
//   start_gpuctl   the persistent block on a stream of its own
//                  (gpumem_swctl_gpu_start, the client kernels preloaded);
//                  if it did not start, it is stopped, the status printed by
//                  name, and the caller must not launch its clients
//   stop_gpuctl    set the stop word and wait for the block (bounded)
//   run_fused      the controller in block 0 of a cooperative launch whose
//                  other blocks run the clients, phase by phase (co-resident
//                  by construction: what compute-sanitizer runs, as it does
//                  not run a persistent block beside other kernels)
// Include after gpumem_swctl.h, in the file that defines GPUMEM_IMPLEMENTATION.
#ifndef GPUMEM_TEST_CUDA_GPUCTL_RUN_H
#define GPUMEM_TEST_CUDA_GPUCTL_RUN_H
#include "gpumem_swctl.h"
#include "cuda_check.h"

/* Start the controller's persistent block of `servers` threads on `stream`,
 * the kernels that will use its pairs preloaded first. GPUMEM_OK, or the
 * reason it did not start (ESTATE: lazy loading and no kernels given; ESYS:
 * CUDA refused; ETIMEDOUT: the block did not run within 10 s), printed as a
 * FAIL line naming `what`. Then its stop word is set and its stream waited
 * for (a block that starts late ends at once), so that nothing of it is
 * left running: the caller must not launch clients, which would wait on a
 * controller that is not there, and counts the run as failed. */
static inline gpumem_status start_gpuctl(gpumem_swctl_gpu *c, const gpumem_swctl_gpu_desc *d, uint32_t servers,
                                         cudaStream_t stream, const void *const *kernels, uint32_t n_kernels,
                                         const char *what) {
    gpumem_status st = gpumem_swctl_gpu_start(c, d, servers, stream, kernels, n_kernels, 10000);
    if (st == GPUMEM_OK) return st;
    printf("FAIL %s: the GPU controller did not start: %s; clients not launched\n", what, gpumem_status_str(st));
    fflush(stdout);
    gpumem_swctl_gpu_stop(d);
    wait_stream(stream, 30, "a GPU controller that did not start, once stopped");
    return st;
}

/* Set the stop word and wait, at most `seconds`, for the block to end. */
static inline void stop_gpuctl(const gpumem_swctl_gpu_desc *d, cudaStream_t stream, double seconds) {
    gpumem_swctl_gpu_stop(d);
    wait_stream(stream, seconds, "GPU controller, after its stop word was set");
}

#if defined(__CUDACC__)
/* Block 0 serves the controller; blocks 1.. are the workers, which run
 * client.run(phase, worker, workers) for each phase in turn, every worker
 * done with a phase before any starts the next (a barrier over the worker
 * blocks: they are co-resident, the launch is cooperative). After the last
 * phase, one worker sets the stop word, and block 0 ends. A Client is a
 * plain struct (copied to the device as a kernel argument) with
 * `static constexpr uint32_t kPhases` and
 * `__device__ void run(uint32_t phase, uint32_t worker, uint32_t workers) const`. */
template <typename Client>
__global__ void gpuctl_fused_kernel(gpumem_swctl_gpu *ctl, Client client, uint32_t *arrived) {
    if (blockIdx.x == 0) {
        gpumem_swctl_gpu_serve(ctl, threadIdx.x, blockDim.x);
        return;
    }
    const uint32_t worker = (blockIdx.x - 1) * blockDim.x + threadIdx.x, workers = (gridDim.x - 1) * blockDim.x;
    for (uint32_t phase = 0; phase < Client::kPhases; phase++) {
        client.run(phase, worker, workers);
        __syncthreads(); // the block's threads done with the phase
        if (threadIdx.x == 0) {
            // Release: this block's phase before the count; acquire: every
            // other block's phase before the next one reads what it wrote.
            const uint32_t want = (phase + 1) * (gridDim.x - 1);
            gpumem_atomic_fetch_add_u32(arrived, 1, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_DEVICE);
            while (gpumem_atomic_load_u32(arrived, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_DEVICE) < want) __nanosleep(256);
        }
        __syncthreads();
    }
    if (worker == 0) // release, system scope: the host may read what the clients wrote once the block ends
        gpumem_atomic_store_u32(&ctl->control[0], 1, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
}

/* Run `client` against the controller `c` (initialised, not running) in
 * one cooperative launch of 256-thread blocks on `stream`: block 0 the
 * controller, then as many worker blocks as fit on the GPU at once, at
 * most enough for `threads` workers. Waits at most `seconds`. False (with a
 * FAIL line) where the device cannot launch it cooperatively. */
template <typename Client>
static bool run_fused(gpumem_swctl_gpu *c, const Client &client, uint32_t threads, cudaStream_t stream,
                      double seconds, const char *what) {
    int per_sm = 0, dev = 0, sms = 0, coop = 0;
    uint32_t *arrived;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gpuctl_fused_kernel<Client>, 256, 0));
    unsigned grid = (unsigned)(per_sm * sms), need = 1 + (threads + 255) / 256;
    if (grid > need) grid = need;
    if (!coop || grid < 2) {
        printf("FAIL %s: no cooperative launch here (supported %d, %u blocks fit)\n", what, coop, grid);
        return false;
    }
    CHECK(cudaMalloc((void **)&arrived, sizeof *arrived)); // nothing runs yet: no persistent block to wait for
    CHECK(cudaMemset(arrived, 0, sizeof *arrived));
    CHECK(cudaDeviceSynchronize());
    void *args[] = {&c, (void *)&client, &arrived};
    CHECK(cudaLaunchCooperativeKernel((void *)gpuctl_fused_kernel<Client>, grid, 256, args, 0, stream));
    wait_stream(stream, seconds, what);
    CHECK(cudaFree(arrived));
    return true;
}
#endif
#endif
