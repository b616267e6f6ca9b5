/* gpumem_cache.h with the host tier's hooks compiled out (GPUMEM_CACHE_TIER
 * 0, for kernels that never use a tier): the cache works alone, and a cache
 * that has a tier attached (by a file compiled with the hooks) is refused
 * with GPUMEM_ESTATE rather than used past its tier. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#define GPUMEM_CACHE_TIER 0
#include <criterion/criterion.h>
#include <string.h>

#include "gpumem_cache.h"

#ifdef GPUMEM_TIER_H
#error "GPUMEM_CACHE_TIER 0 must leave gpumem_tier.h out"
#endif

Test(notier, cache_alone_and_a_foreign_tier_refused) {
    static uint64_t mem[64 * 64]; /* 64 lines of 512 bytes */
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    void *p = NULL;
    uint64_t l, written = 0;
    for (l = 0; l < 64 * 64; l++) mem[l] = l;
    d.n_lines = 64;
    d.line_bytes = 512;
    d.n_slots = 4;
    d.backing = gpumem_cache_backing_memory(mem);
    cr_assert_eq(gpumem_cache_create(&d, &c), GPUMEM_OK);
    for (l = 0; l < 64; l++) { /* evictions and write-backs without hooks */
        cr_assert_eq(gpumem_cache_acquire(c, l, 1, 1, &p), GPUMEM_OK);
        cr_assert_eq(((uint64_t *)p)[0], l * 64);
        ((uint64_t *)p)[1] = l + 1000;
        cr_assert_eq(gpumem_cache_release(c, l, 1), GPUMEM_OK);
    }
    cr_assert_eq(gpumem_cache_flush(c, &written), GPUMEM_OK);
    for (l = 0; l < 64; l++) cr_assert_eq(mem[l * 64 + 1], l + 1000, "line %llu", (unsigned long long)l);
    c->tier = (struct gpumem_tier *)(void *)&written; /* as if another file had attached one */
    cr_assert_eq(gpumem_cache_acquire(c, 1, 1, 0, &p), GPUMEM_ESTATE);
    cr_assert_eq(gpumem_cache_flush(c, NULL), GPUMEM_ESTATE);
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_EBUSY);
    c->tier = NULL;
    cr_assert_eq(gpumem_cache_check_quiescent(c), 0);
    cr_assert_eq(gpumem_cache_destroy(c), GPUMEM_OK);
}
