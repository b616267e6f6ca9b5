/* Statistics read while the controller and the cache run must be race-free
 * (issue 13). Built with ThreadSanitizer and run by `make test` (Criterion's
 * runner cannot start under TSan here, so this is a plain program): a reader
 * thread reads the software controller's counts throughout a queue mix
 * (mix_workload.h), and another reads the cache's counts while threads hit
 * and miss. TSan (halt_on_error) fails the run on a data race; the program
 * fails it on a count that went backwards or any other problem. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <stdio.h>

#include "gpumem_cache.h"
#include "mix_workload.h"

typedef struct cache_arg {
    gpumem_cache *c;
    uint32_t id;
    uint64_t bad;
    int stop; /* atomic, the reader's */
    uint64_t reads, went_back;
    const uint64_t *reader_reads; /* users: the reader's count (atomic), to overlap with it */
} cache_arg;

static void *cache_user(void *p) {
    cache_arg *a = (cache_arg *)p;
    uint64_t rng = 77 + a->id;
    uint32_t i;
    /* at least 2000 accesses, and on until the reader has read 100 times */
    for (i = 0; i < 2000 || __atomic_load_n(a->reader_reads, __ATOMIC_RELAXED) < 100; i++) {
        uint64_t line = mix_rng(&rng) % 64;
        void *d;
        gpumem_status st = gpumem_cache_acquire(a->c, line, 1, 0, &d);
        if (st == GPUMEM_EAGAIN) continue;
        if (st != GPUMEM_OK || ((uint64_t *)d)[0] != line) a->bad++;
        if (st == GPUMEM_OK && gpumem_cache_release(a->c, line, 1) != GPUMEM_OK) a->bad++;
    }
    return NULL;
}

static void *cache_reader(void *p) {
    cache_arg *a = (cache_arg *)p;
    gpumem_cache_stats last, now;
    memset(&last, 0, sizeof last);
    while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
        gpumem_cache_get_stats(a->c, &now);
        if (now.hits < last.hits || now.fills < last.fills) a->went_back++;
        last = now;
        __atomic_store_n(&a->reads, a->reads + 1, __ATOMIC_RELAXED);
        sched_yield();
    }
    return NULL;
}

int main(void) {
    static uint64_t backing[64 * 512];
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    cache_arg users[8], rd;
    pthread_t t[8], rt;
    mix_cfg m;
    mix_result r;
    const char *problem;
    uint64_t bad = 0;
    uint32_t i;
    memset(&m, 0, sizeof m);
    m.threads = 8, m.depth = 8, m.n_cids = 16, m.ios = 300, m.region = 8, m.watchdog_s = 120;
    mix_run(&m, &r);
    problem = mix_problem(&r);
    printf("race_stats: queue mix, %lu commands, statistics read %lu times: %s\n", (unsigned long)r.issued,
           (unsigned long)r.stats_reads, problem ? problem : "ok");
    if (problem) return 1;
    for (i = 0; i < 64; i++) backing[i * 512] = i;
    d.n_lines = 64, d.n_slots = 16, d.backing = gpumem_cache_backing_memory(backing);
    if (gpumem_cache_create(&d, &c) != GPUMEM_OK) return 1;
    memset(&rd, 0, sizeof rd);
    rd.c = c;
    pthread_create(&rt, NULL, cache_reader, &rd);
    for (i = 0; i < 8; i++) {
        memset(&users[i], 0, sizeof users[i]);
        users[i].c = c, users[i].id = i, users[i].reader_reads = &rd.reads;
        pthread_create(&t[i], NULL, cache_user, &users[i]);
    }
    for (i = 0; i < 8; i++) pthread_join(t[i], NULL), bad += users[i].bad;
    __atomic_store_n(&rd.stop, 1, __ATOMIC_RELEASE);
    pthread_join(rt, NULL);
    printf("race_stats: cache, statistics read %lu times, %lu bad accesses, %lu counts went back\n",
           (unsigned long)rd.reads, (unsigned long)bad, (unsigned long)rd.went_back);
    if (gpumem_cache_destroy(c) != GPUMEM_OK) return 1;
    return bad || rd.went_back ? 1 : 0;
}
