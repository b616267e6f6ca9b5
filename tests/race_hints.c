/* Next-use hints under concurrency (issue 43), under ThreadSanitizer (run by
 * `make test`; a plain program, as Criterion cannot start under TSan): a
 * cache of 8 slots over 64 lines of memory, so nearly every access evicts,
 * run twice: under the hinted sequential policy (gpumem_policy.h,
 * desc.seq_policy) and under the lock-free slot kind HINTED_RRIP;
 * writer threads count their writes into words of their own in every line,
 * readers check every line's first word, and hinting threads send hints
 * (right, wrong and random), demotes and epochs the whole time. TSan
 * (halt_on_error) fails the run on a data race; the program fails it when
 * a read or the memory behind the cache after the flush is not what the
 * writes made it: hints are advice and never change an answer. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
/* Wrong hints cost no trust here: the hinters' hints are random, so the
 * policy would soon stop taking them (at once, where the hinters run ahead
 * of the users: a loaded 2-core machine did) and the hinted victim path,
 * which this test is for, would not run under the race at all. */
#define GPUMEM_POLICY_TRUST_WRONG 0u
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpumem_cache.h"

#define LINES 64u
#define LINE_BYTES 512u
#define WRITERS 2u
#define READERS 2u
#define HINTERS 2u
#define ROUNDS 3000u

static uint64_t data[LINES * LINE_BYTES / 8];
static gpumem_cache *cache;
static uint64_t writes[WRITERS][LINES]; /* each writer's own count per line */
static uint64_t bad, refused_hints;
static int stop;

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 31);
}

/* One access; EAGAIN (every slot in use) is retried. */
static void *user(void *arg) {
    uintptr_t id = (uintptr_t)arg;
    uint64_t s = 11 + id;
    uint32_t i;
    for (i = 0; i < ROUNDS; i++) {
        uint64_t line = rng(&s) % LINES, *p;
        int write = id < WRITERS;
        void *d;
        gpumem_status st;
        while ((st = gpumem_cache_acquire(cache, line, 1, write, &d)) == GPUMEM_EAGAIN) sched_yield();
        if (st != GPUMEM_OK) {
            __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
            continue;
        }
        p = (uint64_t *)d;
        if (p[0] != line) __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
        if (write) {
            p[1 + id]++; /* only this writer writes this word, and only while it holds the line */
            writes[id][line]++;
        }
        if (gpumem_cache_release(cache, line, 1) != GPUMEM_OK) __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* Hints, demotes, weights and the clock, at random: only statuses a hint
 * may have (a weight to the slot kind is ESTATE: it takes none). */
static void *hinter(void *arg) {
    uint64_t s = 101 + (uintptr_t)arg, epoch = 0;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        uint64_t r = rng(&s), line = r % LINES;
        gpumem_status st;
        switch ((r >> 8) % 5) {
        case 0: st = gpumem_cache_epoch(cache, ++epoch); break;
        case 1: st = gpumem_cache_demote(cache, line); break;
        case 2:
            st = gpumem_cache_weight(cache, line, (r >> 16) % 100);
            if (st == GPUMEM_ESTATE && cache->policy == GPUMEM_POLICY_HINTED_RRIP) st = GPUMEM_OK;
            break;
        default: st = gpumem_cache_hint(cache, line, epoch + (r >> 16) % 8); break;
        }
        if (st == GPUMEM_ERANGE) __atomic_fetch_add(&refused_hints, 1, __ATOMIC_RELAXED); /* an epoch gone by */
        else if (st != GPUMEM_OK) __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* One run: `slot` 0 under the hinted sequential policy, 1 under the slot
 * kind GPUMEM_POLICY_HINTED_RRIP (no lock at all: hints, hits and sweeps
 * race on the slots' words). Returns nonzero on a failure. */
static int run(int slot) {
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_policy_desc pd = gpumem_policy_desc_default(GPUMEM_POLICY_HINTED, 8);
    gpumem_policy pol;
    void *mem = NULL;
    pthread_t users[WRITERS + READERS], hinters[HINTERS];
    uintptr_t i, w, l;
    uint64_t hinted, right, by_hint;
    bad = refused_hints = 0;
    stop = 0;
    for (l = 0; l < LINES; l++) {
        data[l * LINE_BYTES / 8] = l;
        for (w = 0; w < WRITERS; w++) data[l * LINE_BYTES / 8 + 1 + w] = writes[w][l] = 0;
    }
    d.n_lines = LINES;
    d.line_bytes = LINE_BYTES;
    d.n_slots = 8;
    d.backing = gpumem_cache_backing_memory(data);
    if (slot) {
        d.policy = GPUMEM_POLICY_HINTED_RRIP;
    } else {
        pd.hint_slack = 1;
        mem = malloc(gpumem_policy_bytes(&pd));
        if (!mem || gpumem_policy_init(&pol, &pd, mem) != GPUMEM_OK) return 1;
        d.seq_policy = &pol;
    }
    if (gpumem_cache_create(&d, &cache) != GPUMEM_OK) return 1;
    for (i = 0; i < HINTERS; i++) pthread_create(&hinters[i], NULL, hinter, (void *)i);
    for (i = 0; i < WRITERS + READERS; i++) pthread_create(&users[i], NULL, user, (void *)i);
    for (i = 0; i < WRITERS + READERS; i++) pthread_join(users[i], NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (i = 0; i < HINTERS; i++) pthread_join(hinters[i], NULL);
    if (gpumem_cache_flush(cache, NULL) != GPUMEM_OK) bad++;
    for (l = 0; l < LINES; l++) {
        if (data[l * LINE_BYTES / 8] != l) bad++;
        for (w = 0; w < WRITERS; w++)
            if (data[l * LINE_BYTES / 8 + 1 + w] != writes[w][l]) bad++;
    }
    /* the slot kind: hints applied stand for the victims they made */
    hinted = slot ? cache->slot_hints.right + cache->slot_hints.wrong : pol.hint.right + pol.hint.wrong;
    right = slot ? cache->slot_hints.right : pol.hint.right;
    by_hint = slot ? cache->slot_hints.applied : pol.hint.hinted_victims;
    printf("race_hints (%s): %u accesses by %u threads through 8 slots while %u threads hinted: %llu hints judged "
           "(%llu right), %llu %s, %llu refused as past; %llu wrong\n",
           slot ? "slot kind hinted-rrip" : "sequential hinted", (WRITERS + READERS) * ROUNDS, WRITERS + READERS,
           HINTERS, (unsigned long long)hinted, (unsigned long long)right, (unsigned long long)by_hint,
           slot ? "hints applied" : "victims by hint", (unsigned long long)refused_hints, (unsigned long long)bad);
    gpumem_cache_destroy(cache);
    free(mem);
    return bad || !hinted || !by_hint;
}

int main(void) {
    int failed = run(0);
    return run(1) || failed ? 1 : 0;
}
