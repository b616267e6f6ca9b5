/* The inline row of bench/bench_queue.cpp (BM_Inline) as a plain C program,
 * for counting instructions with valgrind --tool=callgrind, which a timed
 * benchmark cannot give (its iteration counts follow the clock): ROUNDS
 * rounds of {submit BATCH 512-byte reads, serve them in line
 * (gpumem_target_serve_ram), poll them}, one thread, no controller thread.
 *   cc -std=c11 -O2 -I. bench/inline_ir.c -o inline_ir -pthread
 *   inline_ir BATCH ROUNDS
 * Run it under callgrind at ROUNDS and 2*ROUNDS: the difference of the two
 * totals over ROUNDS*BATCH is the instructions per read, start-up excluded
 * (bench/results/issue30-cost-vm.md). Exit 1 if a submit or poll fails. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpumem_swctl.h"

enum { DEPTH = 1024, BLOCKS = 1 << 12, LBA = 512 };
static gpumem_nvme_cmd sq[DEPTH];
static gpumem_nvme_cpl cq[DEPTH];
static _Alignas(64) uint32_t doorbells[32];
static _Alignas(64) uint64_t state[(DEPTH * 64 + DEPTH * 16) / 8 + 64];
static uint16_t swq_mem[DEPTH + 65536 / 2 + 1];
static unsigned char ram[(size_t)BLOCKS * LBA];
static _Alignas(4096) unsigned char bufs[16][LBA];
static gpumem_nvme_qp qp;
static gpumem_nvme_qp_signals signals;
static gpumem_target_queue swq;
static gpumem_target_stats st;

int main(int argc, char **argv) {
    gpumem_nvme_qp_desc d;
    gpumem_nvme_req req[16];
    uint32_t batch = argc > 1 ? (uint32_t)atoi(argv[1]) : 16, i;
    long rounds = argc > 2 ? atol(argv[2]) : 1000, r;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    memset(&d, 0, sizeof d);
    memset(req, 0, sizeof req);
    d.depth = DEPTH;
    d.n_cids = DEPTH;
    d.qid = 1;
    d.ns.nsid = 1;
    d.ns.lba_shift = 9;
    d.ns.n_blocks = BLOCKS;
    d.ns.max_blocks = 8;
    d.sq = sq;
    d.cq = cq;
    d.sq_doorbell = &doorbells[0];
    d.cq_doorbell = &doorbells[16];
    d.signals = &signals;
    d.state = state;
    d.state_bytes = sizeof state;
    if (batch < 1 || batch > 16 || gpumem_nvme_qp_state_bytes(DEPTH, DEPTH) > sizeof state ||
        gpumem_nvme_qp_init(&qp, &d) != GPUMEM_OK || gpumem_target_queue_init(&swq, &d, swq_mem, sizeof swq_mem) != GPUMEM_OK)
        return 2;
    for (r = 0; r < rounds; r++) {
        for (i = 0; i < batch; i++) {
            gpumem_nvme_cmd cmd;
            uint64_t lba = ((rng = rng * 6364136223846793005ull + 1) >> 40) % BLOCKS;
            gpumem_nvme_cmd_read(&cmd, &qp.ns, lba, 1, (uintptr_t)bufs[i], 0);
            if (gpumem_nvme_qp_submit(&qp, &cmd, &req[i]) != GPUMEM_OK) return 1;
        }
        gpumem_target_serve_ram(&swq, &st, &qp.ns, ram, 0);
        for (i = 0; i < batch; i++)
            if (gpumem_nvme_qp_poll(&qp, &req[i]) != GPUMEM_OK) return 1;
    }
    printf("%ld rounds of %u\n", rounds, batch);
    return 0;
}
