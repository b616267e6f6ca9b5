/* Issue 30, finding 7: the buffer of a blocking call that ended early
 * (GPUMEM_ETIMEDOUT) may be reused once gpumem_nvme_qp_orphans_settled says
 * GPUMEM_OK, and then nothing writes into it any more. Built with
 * ThreadSanitizer and run by `make test` (a plain program, as
 * race_stats.c): the main thread gives up a slow read after 1 ms, waits for
 * the rule, then overwrites and frees the buffer, while a helper thread
 * harvests the late completion (its own blocking reads), so that only the
 * rule's acquire can order the controller's write before the reuse. TSan
 * (halt_on_error) fails the run on the race; the program fails on a read
 * that did not end early or a wrong block. Built with -DRULE_STATS it uses
 * the statistics' orphan count instead, as 0.3 documented, and TSan
 * reports the race.
 * A read may also end with its block: a thread descheduled for more than
 * the controller's 5 ms between submitting and its first look finds the
 * completion there, and a found result stands (gpumem__qp_cpl_wait). On a
 * loaded CI machine under TSan 3 of 20 did. Such a round tests nothing, so
 * the program reads until ROUNDS reads ended early (at most MAX_ROUNDS) and
 * checks each read's block. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_swctl.h"

#define ROUNDS 20 /* reads that must end early */
#define MAX_ROUNDS (ROUNDS * 10)

static gpumem_nvme_qp *g_qp;
static int g_stop, g_bad;

static void *harvester(void *p) {
    static unsigned char buf[512];
    uint64_t reads = 0;
    (void)p;
    while (!__atomic_load_n(&g_stop, __ATOMIC_ACQUIRE)) {
        if (gpumem_nvme_qp_read_buf(g_qp, 1, 1, buf, NULL) != GPUMEM_OK || buf[0] != 2) g_bad++;
        reads++;
    }
    return (void *)(uintptr_t)reads;
}

static int settled(gpumem_nvme_qp *qp) {
#ifdef RULE_STATS
    gpumem_nvme_qp_stats st;
    gpumem_nvme_qp_get_stats(qp, &st);
    return st.orphans == 0;
#else
    return gpumem_nvme_qp_orphans_settled(qp) == GPUMEM_OK;
#endif
}

int main(void) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    static unsigned char ram[8 * 512];
    pthread_t t;
    uint32_t round, early = 0;
    gpumem_status st;
    memset(ram, 0, sizeof ram);
    ram[512] = 2; /* block 1 */
    memset(ram + 3 * 512, 9, 512); /* block 3 */
    cfg.n_blocks = 8;
    cfg.ram = ram;
    cfg.latency_ns = 5000000; /* 5 ms a command: the 1 ms read below ends early */
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK || gpumem_swctl_add_qp(ctl, 16, &g_qp) != GPUMEM_OK ||
        gpumem_swctl_start(ctl) != GPUMEM_OK) {
        fprintf(stderr, "race_orphan: setup failed\n");
        return 1;
    }
    pthread_create(&t, NULL, harvester, NULL);
    for (round = 0; round < MAX_ROUNDS && early < ROUNDS; round++) {
        unsigned char *buf = (unsigned char *)malloc(512);
        gpumem_nvme_cmd c;
        gpumem_nvme_cmd_read(&c, &g_qp->ns, 3, 1, (uint64_t)(uintptr_t)buf, 0);
        st = gpumem_nvme_qp_exec_timed(g_qp, &c, NULL, 1000000);
        if (st == GPUMEM_ETIMEDOUT)
            early++;
        else if (st != GPUMEM_OK || buf[0] != 9 || buf[511] != 9)
            g_bad++; /* ended with its block: it must be the right one */
        while (!settled(g_qp)) {
        }
        memset(buf, 0, 512); /* the reuse: nothing may write into it now */
        free(buf);
    }
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    if (gpumem_swctl_destroy(ctl) != GPUMEM_OK) g_bad++;
    printf("race_orphan: %u of %u reads ended early (%u needed), %d bad\n", early, round, ROUNDS, g_bad);
    return early == ROUNDS && g_bad == 0 ? 0 : 1;
}
