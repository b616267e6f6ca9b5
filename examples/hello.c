/* hello: the smallest gpumem program. A software NVMe controller (a host
 * thread serving a namespace in RAM), one queue pair, four blocks written
 * and read back through it.
 *
 *   make examples && build/hello
 *
 * The same calls work from CUDA threads (examples/cuda/hello.cu) and, with
 * gpumem_nvmectl_open instead of gpumem_swctl_create, on a real controller. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <stdio.h>
#include <string.h>

#include "gpumem_nvme.h"

int main(void) {
    /* Any dword-aligned buffer will do: the pair builds PRP1, PRP2 and, past
     * two pages, a PRP list for it. */
    static unsigned char out[4][4096], in[4][4096];
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    gpumem_status st;
    int b, wrong = 0;

    cfg.lba_bytes = 4096; /* a namespace of 1024 blocks of 4 KiB, in RAM */
    cfg.n_blocks = 1024;
    if ((st = gpumem_swctl_create(&cfg, &ctl)) != GPUMEM_OK || (st = gpumem_swctl_add_qp(ctl, 64, &qp)) != GPUMEM_OK ||
        (st = gpumem_swctl_start(ctl)) != GPUMEM_OK) {
        fprintf(stderr, "hello: controller: %s\n", gpumem_status_str(st));
        return 1;
    }
    for (b = 0; b < 4; b++) { /* write blocks 100..103 */
        snprintf((char *)out[b], sizeof out[b], "hello from block %d", 100 + b);
        st = gpumem_nvme_qp_write_buf(qp, 100 + (uint64_t)b, 1, out[b], NULL);
        if (st != GPUMEM_OK) fprintf(stderr, "hello: write %d: %s\n", b, gpumem_status_str(st));
        wrong += st != GPUMEM_OK;
    }
    for (b = 0; b < 4; b++) { /* and read them back */
        st = gpumem_nvme_qp_read_buf(qp, 100 + (uint64_t)b, 1, in[b], NULL);
        if (st != GPUMEM_OK || memcmp(in[b], out[b], sizeof in[b]) != 0) wrong++;
        else printf("block %d: \"%s\"\n", 100 + b, (const char *)in[b]);
    }
    gpumem_swctl_stop(ctl);
    {
        gpumem_swctl_stats s;
        gpumem_swctl_get_stats(ctl, &s);
        printf("controller: %llu commands, %llu protocol violations\n", (unsigned long long)s.commands,
               (unsigned long long)s.violations);
        wrong += s.violations != 0;
    }
    gpumem_swctl_destroy(ctl);
    printf("hello: %s\n", wrong ? "FAILED" : "ok");
    return wrong != 0;
}
