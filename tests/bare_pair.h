/* A queue pair with no controller, in static memory, for tests of what the
 * pair checks and refuses before anything reaches a controller. */
#ifndef GPUMEM_TEST_BARE_PAIR_H
#define GPUMEM_TEST_BARE_PAIR_H
#include <string.h>

#include "gpumem_nvme.h"

/* Depth 8, n_cids command IDs, a namespace of n_blocks 512-byte blocks with
 * max_blocks per command; no PRP-list pages. */
static inline gpumem_nvme_qp_desc bare_pair_desc(uint32_t n_cids, uint64_t n_blocks, uint32_t max_blocks) {
    static gpumem_nvme_cmd sq[8];
    static gpumem_nvme_cpl cq[8];
    static uint32_t db[2];
    static gpumem_nvme_qp_signals signals;
    static uint64_t state[4096];
    gpumem_nvme_qp_desc d;
    memset(&d, 0, sizeof d);
    d.depth = 8;
    d.n_cids = n_cids;
    d.ns.nsid = 1;
    d.ns.lba_shift = 9;
    d.ns.n_blocks = n_blocks;
    d.ns.max_blocks = max_blocks;
    d.sq = sq;
    d.cq = cq;
    d.sq_doorbell = &db[0];
    d.cq_doorbell = &db[1];
    d.signals = &signals;
    d.state = state;
    d.state_bytes = sizeof state;
    return d;
}
#endif
