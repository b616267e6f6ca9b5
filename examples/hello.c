/* hello: the smallest complete gpumem program (README's quickstart). A software NVMe
 * controller serves 1024 blocks of 4 KiB from RAM; one block is written through a queue
 * pair and read back. Compiles as C11, C++17 and CUDA; examples/cuda/hello.cu is the GPU one. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION /* in exactly one file: the host-side code */
#include <stdio.h>
#include <string.h>

#include "gpumem_swctl.h" /* the software controller; includes gpumem_nvme.h (the queue pair) */

static uint32_t out[1024], in[1024]; /* one 4 KiB block each; NVMe wants data buffers dword aligned */

int main(void) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp; /* any number of threads may share it */
    gpumem_status st;
    cfg.lba_bytes = 4096;
    cfg.n_blocks = 1024;
    if ((st = gpumem_swctl_create(&cfg, &ctl)) != GPUMEM_OK) {
        fprintf(stderr, "hello: %s\n", gpumem_status_str(st));
        return 1;
    }
    if ((st = gpumem_swctl_add_qp(ctl, 64, &qp)) == GPUMEM_OK) st = gpumem_swctl_start(ctl);
    snprintf((char *)out, sizeof out, "hello from block 7");
    if (st == GPUMEM_OK) st = gpumem_nvme_qp_write_buf(qp, 7, 1, out, NULL); /* LBA 7, 1 block, from `out` */
    if (st == GPUMEM_OK) st = gpumem_nvme_qp_read_buf(qp, 7, 1, in, NULL);
    gpumem_swctl_destroy(ctl); /* stops the controller thread, frees the pair */
    if (st != GPUMEM_OK || memcmp(in, out, sizeof in) != 0) {
        fprintf(stderr, "hello: %s\n", st != GPUMEM_OK ? gpumem_status_str(st) : "read back other data");
        return 1;
    }
    printf("read back: \"%s\"\n", (const char *)in);
    return 0;
}
