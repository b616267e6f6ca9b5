/* Host threads that play warps of GPUMEM_HOST_WARP lanes, through gpumem.h's
 * test hook, so that the GPU controller's warp-wide loop (ballots,
 * broadcasts, the copies split over lanes) runs with several lanes in the
 * host test suite. Each warp has a barrier for its lanes and a word per
 * lane: a ballot or a broadcast writes the lane's word, waits for the warp,
 * reads, and waits again (the barrier also orders memory, as __syncwarp
 * does). Thread t of n calls host_warp_enter(t) before the warp-wide code;
 * host_warp_setup(n) / host_warp_teardown() around the run. */
#ifndef GPUMEM_TEST_HOST_WARP_H
#define GPUMEM_TEST_HOST_WARP_H
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "gpumem.h"

#define HOST_WARPS_MAX 16
typedef struct host_warp {
    pthread_barrier_t bar;
    uint32_t lanes;
    uint64_t word[32];
} host_warp;
static host_warp host_warps[HOST_WARPS_MAX];
static uint32_t host_warps_used;
static _Thread_local host_warp *host_warp_mine;
static _Thread_local uint32_t host_warp_lane;

static void host_warp_setup(uint32_t threads) {
    uint32_t w;
    host_warps_used = (threads + GPUMEM_WARP_WIDTH - 1) / GPUMEM_WARP_WIDTH;
    if (host_warps_used > HOST_WARPS_MAX) abort();
    for (w = 0; w < host_warps_used; w++) {
        uint32_t left = threads - w * GPUMEM_WARP_WIDTH;
        host_warps[w].lanes = left < GPUMEM_WARP_WIDTH ? left : GPUMEM_WARP_WIDTH;
        pthread_barrier_init(&host_warps[w].bar, NULL, host_warps[w].lanes);
    }
}
static void host_warp_teardown(void) {
    for (uint32_t w = 0; w < host_warps_used; w++) pthread_barrier_destroy(&host_warps[w].bar);
}
static void host_warp_enter(uint32_t t) {
    host_warp_mine = &host_warps[t / GPUMEM_WARP_WIDTH];
    host_warp_lane = t % GPUMEM_WARP_WIDTH;
}

/* Every lane of the warp takes part in each step here (the controller's loop
 * passes the whole warp's mask); anything else is a bug of the caller. */
static void host_warp_check(uint32_t mask) {
    host_warp *w = host_warp_mine;
    if (!w || mask != (w->lanes >= 32 ? 0xFFFFFFFFu : (1u << w->lanes) - 1u)) {
        fprintf(stderr, "host_warp: a step with mask %08x in a warp of %u lanes\n", mask, w ? w->lanes : 0);
        abort();
    }
}

/* Write this lane's word; return once every lane of the warp has. */
static void host_warp_publish(uint32_t mask, uint64_t v) {
    host_warp_check(mask);
    host_warp_mine->word[host_warp_lane] = v;
    pthread_barrier_wait(&host_warp_mine->bar);
}

uint32_t gpumem_host_warp_ballot(uint32_t mask, int pred) {
    uint32_t r = 0, k;
    host_warp_publish(mask, pred != 0);
    for (k = 0; k < host_warp_mine->lanes; k++) r |= (uint32_t)(host_warp_mine->word[k] != 0) << k;
    pthread_barrier_wait(&host_warp_mine->bar); /* all have read before anyone writes again */
    return r;
}

uint64_t gpumem_host_warp_bcast_u64(uint32_t mask, uint64_t v, uint32_t lane) {
    uint64_t r;
    host_warp_publish(mask, v);
    r = host_warp_mine->word[lane];
    pthread_barrier_wait(&host_warp_mine->bar);
    return r;
}

void gpumem_host_warp_sync(uint32_t mask) {
    host_warp_check(mask);
    pthread_barrier_wait(&host_warp_mine->bar);
}
#endif
