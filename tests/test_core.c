/* Criterion tests of gpumem.h: status strings, atomics, helpers, parking. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "gpumem.h"

Test(core, status_strings_are_distinct_and_named) {
    int i, j;
    for (i = 0; i < GPUMEM_STATUS_COUNT_; i++) {
        const char *a = gpumem_status_str((gpumem_status)i);
        cr_assert(a && a[0], "status %d has no words", i);
        cr_assert_str_neq(a, "unknown status", "status %d is not named", i);
        for (j = 0; j < i; j++) cr_assert_str_neq(a, gpumem_status_str((gpumem_status)j), "statuses %d and %d", i, j);
    }
    cr_assert_str_eq(gpumem_status_str((gpumem_status)999), "unknown status");
}

Test(core, atomics_u32_return_old_value_and_update) {
    uint32_t x = 5, e;
    cr_assert_eq(gpumem_atomic_fetch_add_u32(&x, 3, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE), 5u);
    cr_assert_eq(gpumem_atomic_fetch_sub_u32(&x, 1, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_DEVICE), 8u);
    cr_assert_eq(gpumem_atomic_fetch_or_u32(&x, 0x100, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM), 7u);
    cr_assert_eq(gpumem_atomic_fetch_and_u32(&x, 0x10F, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM), 0x107u);
    cr_assert_eq(gpumem_atomic_fetch_xor_u32(&x, 0x101, GPUMEM_ORDER_SEQ_CST, GPUMEM_SCOPE_BLOCK), 0x107u);
    cr_assert_eq(gpumem_atomic_load_u32(&x, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_DEVICE), 0x006u);
    cr_assert_eq(gpumem_atomic_exchange_u32(&x, 42, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE), 6u);
    e = 41;
    cr_assert_not(gpumem_atomic_cas_u32(&x, &e, 1, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE));
    cr_assert_eq(e, 42u, "a failed CAS reports the value it found");
    cr_assert(gpumem_atomic_cas_u32(&x, &e, 1, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE));
    gpumem_atomic_store_u32(&x, 0xFFFFFFFFu, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_DEVICE);
    cr_assert_eq(gpumem_atomic_fetch_add_u32(&x, 2, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE), 0xFFFFFFFFu);
    cr_assert_eq(x, 1u, "32-bit add wraps");
}

Test(core, atomics_u64_return_old_value_and_update) {
    uint64_t x = 1ull << 40, e;
    cr_assert_eq(gpumem_atomic_fetch_add_u64(&x, 1, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE), 1ull << 40);
    cr_assert_eq(gpumem_atomic_fetch_sub_u64(&x, 2, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE), (1ull << 40) + 1);
    cr_assert_eq(gpumem_atomic_fetch_or_u64(&x, 1ull << 63, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE),
                 (1ull << 40) - 1);
    cr_assert_eq(gpumem_atomic_fetch_and_u64(&x, 1ull << 63, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE),
                 (1ull << 63) | ((1ull << 40) - 1));
    cr_assert_eq(gpumem_atomic_fetch_xor_u64(&x, 3, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE), 1ull << 63);
    cr_assert_eq(gpumem_atomic_exchange_u64(&x, 9, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE), (1ull << 63) | 3);
    e = 9;
    cr_assert(gpumem_atomic_cas_u64(&x, &e, 10, GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE));
    cr_assert_eq(gpumem_atomic_load_u64(&x, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_DEVICE), 10u);
}

Test(core, helpers) {
    cr_assert(gpumem_is_pow2_u64(1) && gpumem_is_pow2_u64(65536) && !gpumem_is_pow2_u64(0) &&
              !gpumem_is_pow2_u64(12));
    cr_assert_eq(gpumem_log2_u64(1), 0u);
    cr_assert_eq(gpumem_log2_u64(65536), 16u);
    cr_assert_eq(gpumem_wrap_diff_u32(2, 0xFFFFFFFEu), 4);
    cr_assert_eq(gpumem_wrap_diff_u32(0xFFFFFFFEu, 2), -4);
}

/* Many more threads than cores each increment a shared counter in turn
 * (thread i waits until the counter is i mod n): a ring of waits that only
 * finishes if every parked waiter is woken. */
#define RING_THREADS 32
#define RING_ROUNDS 200
static uint32_t ring_counter;
static gpumem_event ring_event;

static void *ring_worker(void *arg) {
    uint32_t id = (uint32_t)(uintptr_t)arg, r;
    for (r = 0; r < RING_ROUNDS; r++) {
        uint32_t want = r * RING_THREADS + id;
        GPUMEM_WAIT_UNTIL(&ring_event, gpumem_atomic_load_u32(&ring_counter, GPUMEM_ORDER_ACQUIRE,
                                                              GPUMEM_SCOPE_SYSTEM) == want);
        gpumem_atomic_store_u32(&ring_counter, want + 1, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
        gpumem_event_notify(&ring_event);
    }
    return NULL;
}

Test(core, parked_waiters_are_always_woken, .timeout = 120) {
    pthread_t t[RING_THREADS];
    uintptr_t i;
    for (i = 0; i < RING_THREADS; i++) pthread_create(&t[i], NULL, ring_worker, (void *)i);
    for (i = 0; i < RING_THREADS; i++) pthread_join(t[i], NULL);
    cr_assert_eq(ring_counter, (uint32_t)(RING_THREADS * RING_ROUNDS));
    cr_assert_eq(ring_event.waiters, 0u, "every parked thread unregistered");
}
