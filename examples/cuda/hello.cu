// hello, on the GPU: four GPU threads each write one block through a queue
// pair and read it back; the software controller is a host thread serving a
// namespace in RAM. The host version is examples/hello.c.
//
//   make gpu-examples    (builds; runs where a GPU is present)
#define _POSIX_C_SOURCE 200809L
#include "cuda_host.h"
#define GPUMEM_IMPLEMENTATION
#include "gpumem_swctl.h"
#include "tests/cuda/watch.h" // a stalled run reports and exits instead of hanging

__global__ void hello(gpumem_nvme_qp *qp, char *out, char *in, int *wrong) {
    int b = threadIdx.x, i;
    char *o = out + b * 4096, *r = in + b * 4096;
    const char msg[] = "hello from GPU thread ";
    for (i = 0; msg[i]; i++) o[i] = msg[i];
    o[i] = (char)('0' + b);
    o[i + 1] = 0;
    __threadfence_system(); // the data before the command that carries it
    // The pair builds the PRPs for wherever the buffer lies: cudaHostAlloc's
    // blocks start 512 bytes into a page, so a 4 KiB block spans two pages.
    if (gpumem_nvme_qp_write_buf(qp, 100 + b, 1, o, NULL) != GPUMEM_OK ||
        gpumem_nvme_qp_read_buf(qp, 100 + b, 1, r, NULL) != GPUMEM_OK) {
        atomicAdd(wrong, 1);
        return;
    }
    for (i = 0; i < 4096; i++)
        if (((volatile char *)r)[i] != o[i]) {
            atomicAdd(wrong, 1);
            return;
        }
}

int main(void) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    gpumem_swctl_stats s;
    char *out, *in;
    int *wrong, b;
    need_gpu("hello");
    // GPU threads drive the pair: rings pinned and mapped, its client state in
    // GPU memory, a controller that never parks (GPU threads cannot wake it)
    gpumem_swctl_config_gpu_clients(&cfg);
    cfg.lba_bytes = 4096;
    cfg.n_blocks = 1024;
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK || gpumem_swctl_add_qp(ctl, 64, &qp) != GPUMEM_OK ||
        gpumem_swctl_start(ctl) != GPUMEM_OK) {
        fprintf(stderr, "hello: controller setup failed\n");
        return 1;
    }
    CHECK(cudaHostAlloc((void **)&out, 4 * 4096, cudaHostAllocMapped)); // 512-byte aligned, not a page
    CHECK(cudaHostAlloc((void **)&in, 4 * 4096, cudaHostAllocMapped));
    CHECK(cudaHostAlloc((void **)&wrong, sizeof *wrong, cudaHostAllocMapped));
    *wrong = 0;
    {
        SwctlWatch watch(ctl, "hello", 30000);
        hello<<<1, 4>>>(qp, out, in, wrong);
        CHECK(cudaGetLastError());
        wait_kernels(60, "hello"); // bounded: a stall stops the controller, reports and fails
    }
    for (b = 0; b < 4; b++) printf("block %d: \"%s\"\n", 100 + b, in + b * 4096);
    gpumem_swctl_stop(ctl);
    gpumem_swctl_get_stats(ctl, &s);
    printf("controller: %llu commands, %llu protocol violations\n", (unsigned long long)s.commands,
           (unsigned long long)s.violations);
    gpumem_swctl_destroy(ctl);
    printf("hello: %s\n", *wrong || s.violations || s.commands != 8 ? "FAILED" : "ok");
    return *wrong || s.violations || s.commands != 8;
}
