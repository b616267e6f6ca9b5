/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem.h - core of gpumem: portability, atomics, back-off, status codes.
 *
 * gpumem is a header-only C library of lock-free queue and cache primitives
 * that let many GPU (or CPU) threads drive NVMe storage by themselves.
 * This header is included first by every other gpumem header.
 *
 * USAGE
 *
 *   #include <stdio.h>
 *   #include "gpumem.h"
 *
 *   // given: uint32_t *flag
 *   uint32_t counter = 0;                  // plain fixed-width field
 *   uint32_t old = gpumem_atomic_fetch_add_u32(&counter, 1,
 *                        GPUMEM_ORDER_ACQ_REL, GPUMEM_SCOPE_DEVICE);
 *
 *   gpumem_event ev = {0};                 // parking spot for host waiters
 *   // a waiter (GPU: nanosleep back-off; CPU: spin, then futex):
 *   GPUMEM_WAIT_UNTIL(&ev, gpumem_atomic_load_u32(flag, GPUMEM_ORDER_ACQUIRE,
 *                                                 GPUMEM_SCOPE_SYSTEM) != 0);
 *   // the thread that makes progress:
 *   gpumem_atomic_store_u32(flag, 1, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
 *   gpumem_event_notify(&ev);
 *
 *   puts(gpumem_status_str(GPUMEM_ERANGE));
 *
 * The same header compiles as C11, as C++17 and as CUDA C++ (nvcc). Shared
 * state is always a plain struct of fixed-width integers; every concurrent
 * access goes through the gpumem_atomic_* functions below, so host code, GPU
 * threads and a host thread playing an NVMe controller all see one layout.
 *
 * CONFIGURATION (define before including)
 *   GPUMEM_ASSERT(x)       assertion used on host and device paths (default:
 *                          assert() on the host, __trap() on the device; both off
 *                          with NDEBUG)
 *   GPUMEM_MALLOC(n)       host allocator for the optional host shims (default malloc)
 *   GPUMEM_FREE(p)         matching free (default free)
 *   GPUMEM_LOG(...)        printf-style log hook of the host shims
 *                          (default: fprintf to stderr with a "gpumem: " prefix)
 *   GPUMEM_PAD_BYTES       size every hot shared word is padded to, so that two
 *                          unrelated words never share a cache line (default 64)
 *   GPUMEM_SLOT_BYTES      size of one per-position record in a queue (default 32,
 *                          a GPU L2 sector; a multiple of 16, at least 32)
 *   GPUMEM_BACKOFF_MAX_NS  cap of the device back-off sleep (default 256 ns,
 *                          as measured best in the BaM dissertation's code; not
 *                          yet re-measured here: bench_gpu sweeps the per-pair
 *                          knob, gpumem_nvme_qp_set_wait_max_ns, to choose it)
 *   GPUMEM_WARP_POLL       device: lanes of a warp that wait on one queue pair
 *                          together elect one lane to scan its completion queue,
 *                          the others read their own mailboxes (default 1; 0:
 *                          every waiting thread scans, as before)
 *   GPUMEM_NO_STATS        compile the statistics counters of the cache and the
 *                          queue pairs out (gpumem_cache_get_stats then reports
 *                          GPUMEM_ESTATE); the software controllers keep theirs
 *   GPUMEM_BACKOFF_SPINS   host: short pause bursts before parking (default 64)
 *   GPUMEM_PARK_TIMEOUT_NS host: longest park on an event before re-checking
 *                          (default 1 ms; only matters if a wake-up is missed)
 *
 * MEMORY ORDER AND SCOPE
 *   Every atomic takes an explicit gpumem_order (relaxed/acquire/release/acq_rel/
 *   seq_cst) and an explicit gpumem_scope. On the device the scope selects the
 *   libcu++ cuda::atomic_ref thread scope: GPUMEM_SCOPE_DEVICE for counters only
 *   GPU threads touch, GPUMEM_SCOPE_SYSTEM for words that a CPU thread or an NVMe
 *   controller also reads or writes. On the host there is one scope and the
 *   __atomic builtins are used.
 */
#ifndef GPUMEM_H
#define GPUMEM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h> /* memcpy: the host side of the copies */

#define GPUMEM_VERSION_MAJOR 0
#define GPUMEM_VERSION_MINOR 5
#define GPUMEM_VERSION_PATCH 0
#define GPUMEM_VERSION_STRING "0.5.0"

/* ---- portability --------------------------------------------------------- */

#if defined(__CUDACC__)
#define GPUMEM_HD __host__ __device__
#define GPUMEM_DEVICE __device__
#else
#define GPUMEM_HD
#define GPUMEM_DEVICE
#endif

/* GPUMEM_ON_DEVICE is true only in the device pass of a CUDA compilation. */
#if defined(__CUDA_ARCH__)
#define GPUMEM_ON_DEVICE 1
#include <cuda/atomic>
#else
#define GPUMEM_ON_DEVICE 0
#endif

#define GPUMEM_API static inline GPUMEM_HD

#if defined(__cplusplus)
#define GPUMEM_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define GPUMEM_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#ifndef GPUMEM_ASSERT
#if GPUMEM_ON_DEVICE
/* On the device a failed check traps (the kernel ends with an error the
 * host sees at its next CUDA call), unless NDEBUG turns checks off as it
 * does assert() on the host. Checks never test values a device wrote. */
#if defined(NDEBUG)
#define GPUMEM_ASSERT(x) ((void)0)
#else
#define GPUMEM_ASSERT(x) ((x) ? (void)0 : __trap())
#endif
#else
#include <assert.h>
#define GPUMEM_ASSERT(x) assert(x)
#endif
#endif

#ifndef GPUMEM_PAD_BYTES
#define GPUMEM_PAD_BYTES 64
#endif
#ifndef GPUMEM_SLOT_BYTES
#define GPUMEM_SLOT_BYTES 32
#endif
#ifndef GPUMEM_BACKOFF_MAX_NS
#define GPUMEM_BACKOFF_MAX_NS 256
#endif
#ifndef GPUMEM_BACKOFF_SPINS
#define GPUMEM_BACKOFF_SPINS 64
#endif
#ifndef GPUMEM_WARP_POLL
#define GPUMEM_WARP_POLL 1
#endif


GPUMEM_STATIC_ASSERT(GPUMEM_PAD_BYTES >= 8 && (GPUMEM_PAD_BYTES & (GPUMEM_PAD_BYTES - 1)) == 0,
                     "GPUMEM_PAD_BYTES must be a power of two >= 8");
GPUMEM_STATIC_ASSERT(GPUMEM_SLOT_BYTES >= 32 && GPUMEM_SLOT_BYTES % 16 == 0,
                     "GPUMEM_SLOT_BYTES must be a multiple of 16, at least 32");

/* ---- status codes -------------------------------------------------------- */

typedef enum gpumem_status {
    GPUMEM_OK = 0,
    GPUMEM_EINVAL,    /* an argument is out of its documented range */
    GPUMEM_ENULL,     /* a required pointer is NULL */
    GPUMEM_ERANGE,    /* an LBA range or index lies past the end of the data */
    GPUMEM_EAGAIN,    /* not possible right now without waiting; retry later */
    GPUMEM_ENOMEM,    /* an allocation failed or caller memory is too small */
    GPUMEM_EIO,       /* the controller completed the command with an error status */
    GPUMEM_ETIMEDOUT, /* a bounded wait ran out */
    GPUMEM_EOVERFLOW, /* a counter would overflow its field */
    GPUMEM_ENODEV,    /* no such device, or it is not usable */
    GPUMEM_ESTATE,    /* the object is not in a state that allows the call */
    GPUMEM_ESYS,      /* an operating-system call failed (see errno / the log) */
    GPUMEM_EALIGN,    /* a buffer's address breaks an alignment rule (NVMe: data dword aligned) */
    GPUMEM_E2BIG,     /* a transfer is longer than one command may carry (MDTS, PRP list) */
    GPUMEM_EBUSY,     /* the object still has waiters or outstanding work */
    GPUMEM_EABORTED,  /* the command was aborted (its queue pair was reset, or the controller
                         aborted it); the device no longer touches its buffer */
    GPUMEM_STATUS_COUNT_
} gpumem_status;

GPUMEM_API const char *gpumem_status_str(gpumem_status s) {
    switch (s) {
    case GPUMEM_OK: return "ok";
    case GPUMEM_EINVAL: return "invalid argument";
    case GPUMEM_ENULL: return "NULL pointer argument";
    case GPUMEM_ERANGE: return "out of range";
    case GPUMEM_EAGAIN: return "resource busy, try again";
    case GPUMEM_ENOMEM: return "out of memory";
    case GPUMEM_EIO: return "I/O error reported by the controller";
    case GPUMEM_ETIMEDOUT: return "timed out";
    case GPUMEM_EOVERFLOW: return "counter overflow";
    case GPUMEM_ENODEV: return "no such device";
    case GPUMEM_ESTATE: return "invalid state for this operation";
    case GPUMEM_ESYS: return "system call failed";
    case GPUMEM_EALIGN: return "misaligned address: NVMe data buffers must be 4-byte (dword) aligned; PRP lists and cache slots page aligned";
    case GPUMEM_E2BIG: return "transfer too long for one command (namespace MDTS or the command's PRP list)";
    case GPUMEM_EBUSY: return "busy: waiters or outstanding commands remain";
    case GPUMEM_EABORTED: return "command aborted (queue pair reset, or aborted by the controller); its buffer is no longer touched";
    case GPUMEM_STATUS_COUNT_: break;
    }
    return "unknown status";
}

/* ---- atomics ------------------------------------------------------------- */

typedef enum gpumem_order {
    GPUMEM_ORDER_RELAXED,
    GPUMEM_ORDER_ACQUIRE,
    GPUMEM_ORDER_RELEASE,
    GPUMEM_ORDER_ACQ_REL,
    GPUMEM_ORDER_SEQ_CST
} gpumem_order;

typedef enum gpumem_scope {
    GPUMEM_SCOPE_BLOCK,  /* threads of one CUDA block */
    GPUMEM_SCOPE_DEVICE, /* threads of one GPU */
    GPUMEM_SCOPE_SYSTEM  /* GPU threads, CPU threads and peer devices */
} gpumem_scope;

#if GPUMEM_ON_DEVICE

static __forceinline__ GPUMEM_HD cuda::memory_order gpumem__cu_order(gpumem_order o) {
    switch (o) {
    case GPUMEM_ORDER_RELAXED: return cuda::memory_order_relaxed;
    case GPUMEM_ORDER_ACQUIRE: return cuda::memory_order_acquire;
    case GPUMEM_ORDER_RELEASE: return cuda::memory_order_release;
    case GPUMEM_ORDER_ACQ_REL: return cuda::memory_order_acq_rel;
    default: return cuda::memory_order_seq_cst;
    }
}
/* A load may not carry release semantics and a store may not carry acquire;
 * these map an acq_rel request onto the half that applies. */
static __forceinline__ GPUMEM_HD cuda::memory_order gpumem__cu_load_order(gpumem_order o) {
    return (o == GPUMEM_ORDER_RELEASE || o == GPUMEM_ORDER_ACQ_REL) ? cuda::memory_order_acquire
                                                                    : gpumem__cu_order(o);
}
static __forceinline__ GPUMEM_HD cuda::memory_order gpumem__cu_store_order(gpumem_order o) {
    return (o == GPUMEM_ORDER_ACQUIRE || o == GPUMEM_ORDER_ACQ_REL) ? cuda::memory_order_release
                                                                    : gpumem__cu_order(o);
}

/* Run EXPR with `ref` bound to a cuda::atomic_ref of the requested scope. The
 * scope is a template parameter in libcu++, so it is chosen by a switch that
 * the compiler folds away (the scope argument is always a constant). */
#define GPUMEM__CU_SCOPED(T, ptr, scope, EXPR)                                          \
    do {                                                                                 \
        if ((scope) == GPUMEM_SCOPE_SYSTEM) {                                            \
            cuda::atomic_ref<T, cuda::thread_scope_system> ref(*(ptr));                  \
            EXPR;                                                                        \
        } else if ((scope) == GPUMEM_SCOPE_DEVICE) {                                     \
            cuda::atomic_ref<T, cuda::thread_scope_device> ref(*(ptr));                  \
            EXPR;                                                                        \
        } else {                                                                         \
            cuda::atomic_ref<T, cuda::thread_scope_block> ref(*(ptr));                   \
            EXPR;                                                                        \
        }                                                                                \
    } while (0)

#define GPUMEM__DEFINE_ATOMICS(T, SUF)                                                          \
    static __forceinline__ GPUMEM_HD T gpumem_atomic_load_##SUF(T *p, gpumem_order o,          \
                                                                 gpumem_scope s) {              \
        T r;                                                                                    \
        GPUMEM__CU_SCOPED(T, p, s, r = ref.load(gpumem__cu_load_order(o)));                     \
        return r;                                                                               \
    }                                                                                           \
    static __forceinline__ GPUMEM_HD void gpumem_atomic_store_##SUF(T *p, T v, gpumem_order o, \
                                                                     gpumem_scope s) {          \
        GPUMEM__CU_SCOPED(T, p, s, ref.store(v, gpumem__cu_store_order(o)));                    \
    }                                                                                           \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_add)                                                       \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_sub)                                                       \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_or)                                                        \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_and)                                                       \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_xor)                                                       \
    GPUMEM__DEFINE_RMW(T, SUF, exchange)                                                        \
    static __forceinline__ GPUMEM_HD int gpumem_atomic_cas_##SUF(                             \
        T *p, T *expected, T desired, gpumem_order o, gpumem_scope s) {                        \
        int ok;                                                                                \
        GPUMEM__CU_SCOPED(T, p, s,                                                              \
                          ok = ref.compare_exchange_strong(*expected, desired,                  \
                                                           gpumem__cu_order(o),                 \
                                                           gpumem__cu_load_order(o)));          \
        return ok;                                                                              \
    }

#define GPUMEM__DEFINE_RMW(T, SUF, OP)                                                         \
    static __forceinline__ GPUMEM_HD T gpumem_atomic_##OP##_##SUF(T *p, T v, gpumem_order o,  \
                                                                   gpumem_scope s) {           \
        T r;                                                                                   \
        GPUMEM__CU_SCOPED(T, p, s, r = ref.OP(v, gpumem__cu_order(o)));                        \
        return r;                                                                              \
    }

/* Full fence at the given scope (used where a store must be ordered before a
 * later load, the one case acquire/release cannot express). */
static __forceinline__ GPUMEM_HD void gpumem_atomic_fence(gpumem_order o, gpumem_scope s) {
    if (s == GPUMEM_SCOPE_SYSTEM) cuda::atomic_thread_fence(gpumem__cu_order(o), cuda::thread_scope_system);
    else if (s == GPUMEM_SCOPE_DEVICE) cuda::atomic_thread_fence(gpumem__cu_order(o), cuda::thread_scope_device);
    else cuda::atomic_thread_fence(gpumem__cu_order(o), cuda::thread_scope_block);
}

#else /* host: the __atomic builtins of GCC and Clang */

static inline int gpumem__gcc_order(gpumem_order o) {
    switch (o) {
    case GPUMEM_ORDER_RELAXED: return __ATOMIC_RELAXED;
    case GPUMEM_ORDER_ACQUIRE: return __ATOMIC_ACQUIRE;
    case GPUMEM_ORDER_RELEASE: return __ATOMIC_RELEASE;
    case GPUMEM_ORDER_ACQ_REL: return __ATOMIC_ACQ_REL;
    default: return __ATOMIC_SEQ_CST;
    }
}
static inline int gpumem__gcc_load_order(gpumem_order o) {
    return (o == GPUMEM_ORDER_RELEASE || o == GPUMEM_ORDER_ACQ_REL) ? __ATOMIC_ACQUIRE
                                                                    : gpumem__gcc_order(o);
}
static inline int gpumem__gcc_store_order(gpumem_order o) {
    return (o == GPUMEM_ORDER_ACQUIRE || o == GPUMEM_ORDER_ACQ_REL) ? __ATOMIC_RELEASE
                                                                    : gpumem__gcc_order(o);
}

#define GPUMEM__DEFINE_RMW(T, SUF, OP, BUILTIN)                                               \
    static inline GPUMEM_HD T gpumem_atomic_##OP##_##SUF(T *p, T v, gpumem_order o,           \
                                                         gpumem_scope s) {                    \
        (void)s;                                                                              \
        return BUILTIN(p, v, gpumem__gcc_order(o));                                           \
    }

#define GPUMEM__DEFINE_ATOMICS(T, SUF)                                                        \
    static inline GPUMEM_HD T gpumem_atomic_load_##SUF(T *p, gpumem_order o, gpumem_scope s) { \
        (void)s;                                                                              \
        return __atomic_load_n(p, gpumem__gcc_load_order(o));                                 \
    }                                                                                         \
    static inline GPUMEM_HD void gpumem_atomic_store_##SUF(T *p, T v, gpumem_order o,         \
                                                           gpumem_scope s) {                  \
        (void)s;                                                                              \
        __atomic_store_n(p, v, gpumem__gcc_store_order(o));                                   \
    }                                                                                         \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_add, __atomic_fetch_add)                                 \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_sub, __atomic_fetch_sub)                                 \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_or, __atomic_fetch_or)                                   \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_and, __atomic_fetch_and)                                 \
    GPUMEM__DEFINE_RMW(T, SUF, fetch_xor, __atomic_fetch_xor)                                 \
    GPUMEM__DEFINE_RMW(T, SUF, exchange, __atomic_exchange_n)                                 \
    static inline GPUMEM_HD int gpumem_atomic_cas_##SUF(T *p, T *expected, T desired,         \
                                                        gpumem_order o, gpumem_scope s) {     \
        (void)s;                                                                              \
        return __atomic_compare_exchange_n(p, expected, desired, 0, gpumem__gcc_order(o),     \
                                           gpumem__gcc_load_order(o));                        \
    }

static inline GPUMEM_HD void gpumem_atomic_fence(gpumem_order o, gpumem_scope s) {
    (void)s;
    __atomic_thread_fence(gpumem__gcc_order(o));
}

#endif /* GPUMEM_ON_DEVICE */

/* gpumem_atomic_{load,store,fetch_add,fetch_sub,fetch_or,fetch_and,fetch_xor,
 * exchange,cas}_{u32,u64}. cas returns nonzero on success and otherwise writes
 * the value it found to *expected (compare_exchange_strong semantics). */
GPUMEM__DEFINE_ATOMICS(uint32_t, u32)
GPUMEM__DEFINE_ATOMICS(uint64_t, u64)

/* ---- back-off and parking for spin loops ---------------------------------- */

/* A waiting GPU thread sleeps 8 ns, doubling up to GPUMEM_BACKOFF_MAX_NS, so
 * that the warp scheduler can run the thread it waits for.
 *
 * A waiting host thread spins briefly with the pause instruction and then
 * parks on an event (an eventcount on a Linux futex): with more threads than
 * cores, the thread it waits for may be preempted, and neither spinning nor
 * sched_yield (a near no-op under the EEVDF scheduler) gives that thread the
 * core before the next timer tick. Whoever makes progress others may wait for
 * calls gpumem_event_notify(), which costs one fence and one load unless
 * somebody is parked. Parking has a timeout, so a missed notification costs
 * time, never progress.
 *
 * Usage, where `cond` is re-evaluated each round:
 *   GPUMEM_WAIT_UNTIL(&ev, cond);
 */
typedef struct gpumem_backoff {
    uint32_t ns;    /* device: next sleep */
    uint32_t spins; /* host: rounds so far; device: the cap of the sleep */
} gpumem_backoff;

/* An eventcount: seq changes on every notification that found a waiter.
 * `shared` (set before first use, then read-only): waiters and wakers may be
 * in different processes that map the event's memory (a process-shared
 * futex, a little slower in the kernel); 0 (what `= {0}` gives): one process. */
typedef struct gpumem_event {
    uint32_t seq;
    uint32_t waiters;
    uint32_t shared;
    uint32_t pad_[GPUMEM_PAD_BYTES / 4 - 3];
} gpumem_event;

/* The futex operation flag for an event: FUTEX_PRIVATE_FLAG (128) unless
 * the event is process-shared. */
#define GPUMEM__FUTEX_FLAGS(ev) ((ev)->shared ? 0 : 128)

/* A back-off whose device sleep grows up to cap_ns (at least 8 ns); the host
 * ignores the cap (it spins, then parks), except that 0 spins only briefly.
 * Queue pairs pass their own cap (gpumem_nvme_qp_set_wait_max_ns): many
 * waiters on a pair in host memory poll across PCIe, and a longer cap trades
 * wake-up latency for bus traffic. */
GPUMEM_API gpumem_backoff gpumem_backoff_start_capped(uint32_t cap_ns) {
    gpumem_backoff b;
    b.ns = 8;
#if GPUMEM_ON_DEVICE
    b.spins = cap_ns < 8 ? 8 : cap_ns;
#else
    /* cap_ns 0: a wait on another host thread's step, which, when there
     * are more threads than cores, has usually been preempted: a few
     * rounds of pause (well under a microsecond), then park, so that it
     * gets the core. */
    b.spins = cap_ns == 0 && GPUMEM_BACKOFF_SPINS > 4 ? GPUMEM_BACKOFF_SPINS - 4 : 0;
#endif
    return b;
}

GPUMEM_API gpumem_backoff gpumem_backoff_start(void) { return gpumem_backoff_start_capped(GPUMEM_BACKOFF_MAX_NS); }

#if !GPUMEM_ON_DEVICE
#include <sched.h>
#include <time.h>
#if defined(__linux__)
#include <errno.h>
#include <limits.h>
#include <sys/syscall.h>
#if defined(__cplusplus) || !defined(__STRICT_ANSI__) || defined(_DEFAULT_SOURCE) || defined(_GNU_SOURCE)
#include <unistd.h>
#else
long syscall(long number, ...); /* strict C11 hides it; it is in every libc on Linux */
#endif
#endif
#if defined(__STRICT_ANSI__) && !defined(_POSIX_C_SOURCE) && !defined(__cplusplus)
int nanosleep(const struct timespec *req, struct timespec *rem); /* POSIX, hidden by strict C11 */
#endif
static inline void gpumem__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}
static inline void gpumem__host_sleep_ns(long ns) {
    struct timespec ts;
    ts.tv_sec = 0;
    ts.tv_nsec = ns;
    nanosleep(&ts, NULL);
}
#endif

/* One round of waiting. Returns 1 while the caller should simply re-check
 * (device: always; host: during the short spin), 0 when a host caller should
 * park instead. */
GPUMEM_API int gpumem_backoff_pause(gpumem_backoff *b) {
    if (!b) return 0;
#if GPUMEM_ON_DEVICE
    __nanosleep(b->ns);
    b->ns = b->ns * 2 > b->spins ? b->spins : b->ns * 2;
    return 1;
#else
    if (b->spins < GPUMEM_BACKOFF_SPINS) {
        uint32_t i, n = 1u << (b->spins < 4 ? b->spins : 4);
        for (i = 0; i < n; i++) gpumem__cpu_relax();
        b->spins++;
        return 1;
    }
    return 0;
#endif
}

/* A clock in nanoseconds for deadlines: the GPU's global timer on the
 * device; on the host CLOCK_MONOTONIC where <time.h> offers it (POSIX),
 * else the C11 calendar clock (strict C11 hides CLOCK_MONOTONIC; the
 * futex waits below then time out on the calendar clock too). */
GPUMEM_API uint64_t gpumem_clock_ns(void) {
#if GPUMEM_ON_DEVICE
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    struct timespec ts;
#if defined(CLOCK_MONOTONIC)
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

/* Every class of waiter (see gpumem__event_sleep_bits). */
#define GPUMEM_EVENT_ALL 0xFFFFFFFFu

/* As many waiters as there are: a wake count (gpumem__event_kick). */
#define GPUMEM__WAKE_EVERYONE 0x7FFFFFFF

/* The futex clock of gpumem_clock_ns, for an absolute timeout: monotonic
 * (FUTEX_WAIT_BITSET's own) or, without it, the calendar clock. */
#if defined(CLOCK_MONOTONIC)
#define GPUMEM__FUTEX_CLOCK 0
#else
#define GPUMEM__FUTEX_CLOCK 256 /* FUTEX_CLOCK_REALTIME */
#endif

/* Wake up to n parked waiters of the classes in `bits` if anybody is parked,
 * for a caller that has just made its change visible and ordered it before
 * this load of `waiters` with a seq_cst fence (one fence serves several
 * events). The waiter registers before re-checking its condition, so either
 * we see it registered or it sees our change. Bumping seq makes a waiter
 * that registered but is not asleep yet return from its sleep at once, so a
 * targeted wake is never lost to that window (it may cost such a waiter of
 * another class one more look). */
GPUMEM_API void gpumem__event_kick(gpumem_event *ev, int n, uint32_t bits) {
#if GPUMEM_ON_DEVICE
    (void)ev, (void)n, (void)bits;
#else
    if (!ev) return;
    if (gpumem_atomic_load_u32(&ev->waiters, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM) == 0) return;
    gpumem_atomic_fetch_add_u32(&ev->seq, 1, GPUMEM_ORDER_SEQ_CST, GPUMEM_SCOPE_SYSTEM);
#if defined(__linux__)
    if (bits == GPUMEM_EVENT_ALL)
        syscall(SYS_futex, &ev->seq, 1 /* FUTEX_WAKE */ | GPUMEM__FUTEX_FLAGS(ev), n, NULL, NULL, 0);
    else
        syscall(SYS_futex, &ev->seq, 10 /* FUTEX_WAKE_BITSET */ | GPUMEM__FUTEX_FLAGS(ev), n, NULL, NULL, bits);
#else
    (void)n, (void)bits;
#endif
#endif
}

/* The fence gpumem__event_kick needs after the caller's change. */
GPUMEM_API void gpumem__event_fence(void) {
#if !GPUMEM_ON_DEVICE
    gpumem_atomic_fence(GPUMEM_ORDER_SEQ_CST, GPUMEM_SCOPE_SYSTEM);
#endif
}

/* Wake up to n parked waiters, of any class, if there are any. */
GPUMEM_API void gpumem__event_wake(gpumem_event *ev, int n) {
#if GPUMEM_ON_DEVICE
    (void)ev, (void)n;
#else
    if (!ev) return;
    gpumem__event_fence();
    gpumem__event_kick(ev, n, GPUMEM_EVENT_ALL);
#endif
}

/* Wake every parked waiter. Call after making a change that any of them may
 * be waiting for. */
GPUMEM_API void gpumem_event_notify(gpumem_event *ev) {
#if GPUMEM_ON_DEVICE
    (void)ev;
#else
    gpumem__event_wake(ev, GPUMEM__WAKE_EVERYONE);
#endif
}

/* Wake one parked waiter: for a change that only one of them can use (one
 * free unit of something), so that the rest sleep on instead of all waking
 * to find it gone. A waiter woken for nothing re-parks; every waiter's park
 * is bounded by GPUMEM_PARK_TIMEOUT_NS, so a wake-up taken by a thread that
 * was not parked costs time, never progress. */
GPUMEM_API void gpumem_event_notify_one(gpumem_event *ev) { gpumem__event_wake(ev, 1); }

/* Park protocol, host only: begin (register, read seq), re-check the
 * condition, sleep unless it holds or seq moved, end (unregister). */
GPUMEM_API uint32_t gpumem__event_begin(gpumem_event *ev) {
#if GPUMEM_ON_DEVICE
    (void)ev;
    return 0;
#else
    if (!ev) return 0;
    gpumem_atomic_fetch_add_u32(&ev->waiters, 1, GPUMEM_ORDER_SEQ_CST, GPUMEM_SCOPE_SYSTEM);
    return gpumem_atomic_load_u32(&ev->seq, GPUMEM_ORDER_SEQ_CST, GPUMEM_SCOPE_SYSTEM);
#endif
}

/* Sleep while ev->seq is `seen`, at most timeout_ns, as a waiter of
 * the classes in `bits`: a wake for other classes passes it by (a wake for
 * GPUMEM_EVENT_ALL reaches every class). Classes let one futex word serve
 * waiters that wait for different things, a queue pair's completions by
 * command ID, and let a waker reach only those whose condition it changed. */
GPUMEM_API void gpumem__event_sleep_bits(gpumem_event *ev, uint32_t seen, long timeout_ns, uint32_t bits) {
#if GPUMEM_ON_DEVICE
    (void)ev, (void)seen, (void)timeout_ns, (void)bits;
#elif defined(__linux__)
    struct timespec ts;
    long rc;
    if (!ev) {
        gpumem__host_sleep_ns(timeout_ns < 20000 ? timeout_ns : 20000);
        return;
    }
    if (bits == GPUMEM_EVENT_ALL) { /* FUTEX_WAIT: a relative timeout */
        ts.tv_sec = timeout_ns / 1000000000L;
        ts.tv_nsec = timeout_ns % 1000000000L;
        rc = syscall(SYS_futex, &ev->seq, 0 /* FUTEX_WAIT */ | GPUMEM__FUTEX_FLAGS(ev), seen, &ts, NULL, 0);
    } else { /* FUTEX_WAIT_BITSET: an absolute timeout, on gpumem_clock_ns's clock */
        const uint64_t until = gpumem_clock_ns() + (uint64_t)timeout_ns;
        ts.tv_sec = (time_t)(until / 1000000000ull);
        ts.tv_nsec = (long)(until % 1000000000ull);
        rc = syscall(SYS_futex, &ev->seq, 9 /* FUTEX_WAIT_BITSET */ | GPUMEM__FUTEX_FLAGS(ev) | GPUMEM__FUTEX_CLOCK,
                     seen, &ts, NULL, bits);
    }
    if (rc != 0 && errno != EAGAIN && errno != ETIMEDOUT && errno != EINTR)
        /* Memory the kernel cannot key a process-shared futex on (a driver's
         * mapping, such as pinned CUDA memory may be): a short sleep instead,
         * so the wait stays a wait and stays bounded. */
        gpumem__host_sleep_ns(timeout_ns < 20000 ? timeout_ns : 20000);
#else
    (void)ev, (void)seen, (void)bits;
    gpumem__host_sleep_ns(timeout_ns < 20000 ? timeout_ns : 20000);
#endif
}

GPUMEM_API void gpumem__event_sleep(gpumem_event *ev, uint32_t seen, long timeout_ns) {
    gpumem__event_sleep_bits(ev, seen, timeout_ns, GPUMEM_EVENT_ALL);
}

GPUMEM_API void gpumem__event_end(gpumem_event *ev) {
#if !GPUMEM_ON_DEVICE
    if (ev) gpumem_atomic_fetch_sub_u32(&ev->waiters, 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
#else
    (void)ev;
#endif
}

#ifndef GPUMEM_PARK_TIMEOUT_NS
#define GPUMEM_PARK_TIMEOUT_NS 1000000L /* a missed wake-up costs at most 1 ms */
#endif

/* Wait until `cond` is true, or until `give_up` is: the bounded form. `cond`
 * may have side effects (take a command ID, harvest completions): it is
 * evaluated exactly once per round, and the loop ends on the first evaluation
 * that is true. `give_up` (a deadline passed, the controller stopped) is
 * evaluated only after `cond` was false; the caller tells the two endings
 * apart by what they set. A waker that notifies the event after making
 * `give_up` true (stopping a controller) ends parked waits at once; a
 * deadline is noticed within GPUMEM_PARK_TIMEOUT_NS. */
#define GPUMEM_WAIT_UNTIL_OR(ev, cond, give_up) GPUMEM_WAIT_CAPPED(ev, GPUMEM_BACKOFF_MAX_NS, cond, give_up)

/* GPUMEM_WAIT_UNTIL_OR with the device back-off capped at cap_ns. */
#define GPUMEM_WAIT_CAPPED(ev, cap_ns, cond, give_up) \
    GPUMEM__WAIT_PARKING(ev, cap_ns, GPUMEM_EVENT_ALL, cond, give_up, (void)0, (void)0)

/* The general form, for waits that park as one class of waiter (`bits`, see
 * gpumem__event_sleep_bits): on the host, `before_park` runs before the
 * waiter registers (to tell its waker it may be asleep) and `after_park`
 * after each park (whatever woke it). The device ignores all three: a GPU
 * thread never parks. */
#if GPUMEM_ON_DEVICE
#define GPUMEM__WAIT_PARKING(ev, cap_ns, bits, cond, give_up, before_park, after_park) \
    do {                                                                             \
        gpumem_backoff gpumem_b_ = gpumem_backoff_start_capped(cap_ns);              \
        for (;;) {                                                                   \
            if (cond) break;                                                         \
            if (give_up) break;                                                      \
            gpumem_backoff_pause(&gpumem_b_);                                        \
        }                                                                            \
    } while (0)
#else
#define GPUMEM__WAIT_PARKING(ev, cap_ns, bits, cond, give_up, before_park, after_park)                \
    do {                                                                                            \
        gpumem_backoff gpumem_b_ = gpumem_backoff_start_capped(cap_ns);                             \
        for (;;) {                                                                                  \
            int gpumem_done_;                                                                       \
            uint32_t gpumem_seen_;                                                                  \
            if (cond) break;                                                                        \
            if (give_up) break;                                                                     \
            if (gpumem_backoff_pause(&gpumem_b_)) continue;                                         \
            before_park;                                                                            \
            gpumem_seen_ = gpumem__event_begin(ev); /* register, then re-check */                   \
            gpumem_done_ = (cond) ? 1 : 0;                                                          \
            if (!gpumem_done_) gpumem__event_sleep_bits((ev), gpumem_seen_, GPUMEM_PARK_TIMEOUT_NS, (bits)); \
            gpumem__event_end(ev);                                                                  \
            if (gpumem_done_) break;                                                                \
            after_park;                                                                             \
        }                                                                                           \
    } while (0)
#endif

/* Wait until `cond` is true, without a bound. */
#define GPUMEM_WAIT_UNTIL(ev, cond) GPUMEM_WAIT_UNTIL_OR(ev, cond, 0)

/* ---- spin locks -------------------------------------------------------------
 *
 * One 32-bit word, 0 free and 1 held, for state held briefly or across one
 * line's I/O (the cache's and the tier's slot locks, a sequential policy,
 * GMT's model, the share's line and pool locks). Taking is an acquire and
 * giving back a release, so what one holder wrote under the lock is seen
 * by the next. `scope` is the widest set of threads that contend on the
 * word (device for one GPU's cache, system where host and GPU threads both
 * take it).
 *
 * A waiter (gpumem__spin_lock) backs off on the device and spins, then parks
 * on `ev` on the host. So whether an unlock must wake is not a property of
 * the holder's hurry: a holder preempted for a moment already lets a waiter
 * park, and that waiter would then sleep until an unrelated notification
 * or GPUMEM_PARK_TIMEOUT_NS. Every lock that anyone waits for with
 * gpumem__spin_lock is therefore given back with its event (one fence and
 * one load when nobody is parked; nothing on the device); NULL is only for
 * a word that is only ever tried (gpumem__spin_trylock), never waited on.
 * Each call site says which. Private (two underscores): the library's own
 * layers use it; a NULL word is their bug, and the device path pays no
 * check for it. */
GPUMEM_API int gpumem__spin_trylock(uint32_t *w, gpumem_scope scope, int look_first) {
    uint32_t unlocked = 0;
    /* look_first: test and test-and-set, for a word many threads try at
     * once. A CAS takes the line for writing even when it fails, so under
     * contention failed CASes would keep moving the line while its holder
     * needs it to unlock; a relaxed load shares it and fails for free (it
     * orders nothing: the CAS's acquire does, when it wins). 0 for a word
     * tried by one thread at a time, where the load is only an instruction
     * and a register more (the cache's slot locks, in every kernel that can
     * miss: bench/results/registers-*.md). */
    if (look_first && gpumem_atomic_load_u32(w, GPUMEM_ORDER_RELAXED, scope) != 0) return 0;
    return gpumem_atomic_cas_u32(w, &unlocked, 1, GPUMEM_ORDER_ACQUIRE, scope);
}

GPUMEM_API void gpumem__spin_lock(uint32_t *w, gpumem_scope scope, int look_first, gpumem_event *ev) {
    GPUMEM_WAIT_UNTIL(ev, gpumem__spin_trylock(w, scope, look_first));
}

/* Give the lock back; ev: the event its waiters park on (NULL: none can). */
GPUMEM_API void gpumem__spin_unlock(uint32_t *w, gpumem_scope scope, gpumem_event *ev) {
    gpumem_atomic_store_u32(w, 0, GPUMEM_ORDER_RELEASE, scope);
    if (ev) gpumem_event_notify(ev);
}

/* No time limit, for the *_timed functions. */
#define GPUMEM_NO_TIMEOUT UINT64_MAX

/* The deadline `timeout_ns` from now (GPUMEM_NO_TIMEOUT stays that, and a
 * sum past 2^64 saturates to it). */
GPUMEM_API uint64_t gpumem_deadline_ns(uint64_t timeout_ns) {
    uint64_t now;
    if (timeout_ns == GPUMEM_NO_TIMEOUT) return GPUMEM_NO_TIMEOUT;
    now = gpumem_clock_ns();
    return timeout_ns > GPUMEM_NO_TIMEOUT - now ? GPUMEM_NO_TIMEOUT : now + timeout_ns;
}

/* Whether a deadline has passed (never for GPUMEM_NO_TIMEOUT, which reads no clock). */
GPUMEM_API int gpumem_deadline_passed(uint64_t deadline_ns) {
    return deadline_ns != GPUMEM_NO_TIMEOUT && gpumem_clock_ns() >= deadline_ns;
}

/* ---- small helpers ------------------------------------------------------- */

/* Where a device thread runs, read from a PTX special register; 0 on the
 * host (a host thread is lane 0 of SM 0). */
#if GPUMEM_ON_DEVICE
#define GPUMEM__SPECIAL_REG(name, reg)                    \
    GPUMEM_API uint32_t name(void) {                      \
        uint32_t v;                                       \
        asm volatile("mov.u32 %0, %%" reg ";" : "=r"(v)); \
        return v;                                         \
    }
#else
#define GPUMEM__SPECIAL_REG(name, reg) \
    GPUMEM_API uint32_t name(void) { return 0; }
#endif
GPUMEM__SPECIAL_REG(gpumem_sm_id, "smid")     /* the SM */
GPUMEM__SPECIAL_REG(gpumem_lane_id, "laneid") /* the lane in its warp, any block shape */

/* Warp-wide steps for code that runs on both sides: on the device a warp of
 * GPUMEM_WARP_WIDTH lanes (mask: the lanes taking part, each of which must
 * make the same call); on the host a thread is a warp of one, so the same
 * loop runs in the host test suite. */
#if GPUMEM_ON_DEVICE
#define GPUMEM_WARP_WIDTH 32u
GPUMEM_API uint32_t gpumem_warp_ballot(uint32_t mask, int pred) { return __ballot_sync(mask, pred); }
GPUMEM_API uint64_t gpumem_warp_bcast_u64(uint32_t mask, uint64_t v, uint32_t lane) {
    return __shfl_sync(mask, (unsigned long long)v, (int)lane);
}
GPUMEM_API void gpumem_warp_sync(uint32_t mask) { __syncwarp(mask); }
#elif defined(GPUMEM_HOST_WARP)
/* For tests: host threads play warps of GPUMEM_HOST_WARP lanes (at most 32),
 * so that warp-wide code runs with several lanes on the host. The program
 * defines the three steps (tests/host_warp.h: a barrier per warp). */
#define GPUMEM_WARP_WIDTH ((uint32_t)(GPUMEM_HOST_WARP))
uint32_t gpumem_host_warp_ballot(uint32_t mask, int pred);
uint64_t gpumem_host_warp_bcast_u64(uint32_t mask, uint64_t v, uint32_t lane);
void gpumem_host_warp_sync(uint32_t mask);
GPUMEM_API uint32_t gpumem_warp_ballot(uint32_t mask, int pred) { return gpumem_host_warp_ballot(mask, pred); }
GPUMEM_API uint64_t gpumem_warp_bcast_u64(uint32_t mask, uint64_t v, uint32_t lane) {
    return gpumem_host_warp_bcast_u64(mask, v, lane);
}
GPUMEM_API void gpumem_warp_sync(uint32_t mask) { gpumem_host_warp_sync(mask); }
#else
#define GPUMEM_WARP_WIDTH 1u
GPUMEM_API uint32_t gpumem_warp_ballot(uint32_t mask, int pred) { return pred ? (mask & 1u) : 0u; }
GPUMEM_API uint64_t gpumem_warp_bcast_u64(uint32_t mask, uint64_t v, uint32_t lane) {
    (void)mask, (void)lane;
    return v;
}
GPUMEM_API void gpumem_warp_sync(uint32_t mask) { (void)mask; }
#endif
/* The lowest lane set in a nonzero mask. */
GPUMEM_API uint32_t gpumem_lowest_lane(uint32_t mask) {
#if GPUMEM_ON_DEVICE
    return (uint32_t)__ffs(mask) - 1u;
#else
    uint32_t k = 0;
    if (!mask) return 0xFFFFFFFFu; /* as __ffs(0) - 1 on the device: no lane */
    while (!(mask & 1u)) mask >>= 1, k++;
    return k;
#endif
}

GPUMEM_API int gpumem_is_pow2_u64(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

GPUMEM_API uint32_t gpumem_log2_u64(uint64_t x) { /* x must be a power of two */
    uint32_t r = 0;
    while (x > 1) {
        x >>= 1;
        r++;
    }
    return r;
}

/* Signed distance a - b of two wrapping 32-bit counters: correct as long as the
 * two are less than 2^31 apart, which every use in gpumem guarantees. */
GPUMEM_API int32_t gpumem_wrap_diff_u32(uint32_t a, uint32_t b) { return (int32_t)(a - b); }

#define GPUMEM_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((size_t)(a) - 1))

/* ---- copies that run on both sides ---------------------------------------- */

/* One unit of type T at index k of p, loaded into v or stored from v. The
 * device makes typed accesses (the callers guarantee the alignment: a
 * 16-byte unit is one 128-bit load or store); the host a fixed-size memcpy,
 * which compiles to the same moves without assuming anything about the
 * types the caller's buffers hold. */
#if GPUMEM_ON_DEVICE
typedef uint4 gpumem__v16;
#define GPUMEM__UNIT_LOAD(T, v, p, k) ((v) = ((const T *)(p))[k])
#define GPUMEM__UNIT_STORE(T, p, k, v) (((T *)(p))[k] = (v))
#else
typedef struct gpumem__v16 {
    uint64_t lo, hi;
} gpumem__v16;
#define GPUMEM__UNIT_LOAD(T, v, p, k) memcpy(&(v), (const unsigned char *)(p) + (size_t)(k) * sizeof(T), sizeof(T))
#define GPUMEM__UNIT_STORE(T, p, k, v) memcpy((unsigned char *)(p) + (size_t)(k) * sizeof(T), &(v), sizeof(T))
#endif
/* Unit k of type T from s to d. */
#define GPUMEM__COPY_UNIT(T, d, s, k)      \
    do {                                   \
        T v_;                              \
        GPUMEM__UNIT_LOAD(T, v_, s, k);    \
        GPUMEM__UNIT_STORE(T, d, k, v_);   \
    } while (0)

/* `units` units of T from s to d, lane `lane` of `width` taking units lane,
 * lane + width, ...: each lane loads four of its units into registers before
 * it stores any, so a lane has four loads in flight instead of waiting out
 * each load's latency before the next (a 4 KiB copy by 32 lanes is two
 * such groups of 16-byte units). Loads all come before stores as written,
 * so overlapping buffers behave as a lane-by-lane copy would. */
#define GPUMEM__COPY_UNITS_AS(T, d, s, units, lane, width)                                 \
    do {                                                                                   \
        const uint64_t w_ = (width);                                                       \
        uint64_t k_ = (lane);                                                              \
        for (; k_ + 3 * w_ < (units); k_ += 4 * w_) {                                      \
            T v0_, v1_, v2_, v3_;                                                          \
            GPUMEM__UNIT_LOAD(T, v0_, s, k_);                                              \
            GPUMEM__UNIT_LOAD(T, v1_, s, k_ + w_);                                         \
            GPUMEM__UNIT_LOAD(T, v2_, s, k_ + 2 * w_);                                     \
            GPUMEM__UNIT_LOAD(T, v3_, s, k_ + 3 * w_);                                     \
            GPUMEM__UNIT_STORE(T, d, k_, v0_);                                             \
            GPUMEM__UNIT_STORE(T, d, k_ + w_, v1_);                                        \
            GPUMEM__UNIT_STORE(T, d, k_ + 2 * w_, v2_);                                    \
            GPUMEM__UNIT_STORE(T, d, k_ + 3 * w_, v3_);                                    \
        }                                                                                  \
        for (; k_ < (units); k_ += w_) GPUMEM__COPY_UNIT(T, d, s, k_);                     \
    } while (0)

/* `units` units of `unit` bytes (16, 8, 4, 2 or 1; both addresses aligned
 * to it), lane `lane` of `width` (GPUMEM__COPY_UNITS_AS): the lanes of a
 * warp touch neighbouring units, so each step is one coalesced access of
 * width * unit bytes. */
GPUMEM_API void gpumem__copy_units(unsigned char *d, const unsigned char *s, uint64_t units, uint32_t unit,
                                   uint32_t lane, uint32_t width) {
    switch (unit) {
    case 16: GPUMEM__COPY_UNITS_AS(gpumem__v16, d, s, units, lane, width); break;
    case 8: GPUMEM__COPY_UNITS_AS(uint64_t, d, s, units, lane, width); break;
    case 4: GPUMEM__COPY_UNITS_AS(uint32_t, d, s, units, lane, width); break;
    case 2: GPUMEM__COPY_UNITS_AS(uint16_t, d, s, units, lane, width); break;
    default: GPUMEM__COPY_UNITS_AS(unsigned char, d, s, units, lane, width);
    }
}

/* Copy n bytes with `width` lanes of a warp together: every lane calls with
 * the same arguments and its own `lane`, and each byte is copied once. The
 * middle moves in the widest unit (16, 8, 4, 2 bytes) on which the two
 * addresses agree, the unaligned head and tail byte by byte. One thread on
 * the host (width 1) is plain memcpy; one thread on the device passes 0
 * and 1 and still moves 16-byte units, four in flight. */
GPUMEM_API void gpumem_copy_lanes(void *dst, const void *src, uint64_t n, uint32_t lane, uint32_t width) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    uint32_t unit = 16;
    uint64_t head, units, i;
#if !GPUMEM_ON_DEVICE
    if (n == 0) return; /* no arithmetic on a NULL buffer (host only: on the device it cost 2 registers) */
    if (width == 1) {
        if (n) memcpy(d, s, n);
        return;
    }
#endif
    while (unit > 1 && (((uintptr_t)d ^ (uintptr_t)s) & (unit - 1)) != 0) unit >>= 1;
    head = (unit - ((uintptr_t)d & (unit - 1))) & (unit - 1);
    if (head > n) head = n;
    units = (n - head) / unit;
    for (i = lane; i < head; i += width) d[i] = s[i];
    gpumem__copy_units(d + head, s + head, units, unit, lane, width);
    for (i = head + units * unit + lane; i < n; i += width) d[i] = s[i];
}

/* Copy one small value of n bytes (an array element) on one thread. On the
 * device: in the widest of 8, 4, 2 and 1 bytes that divides n and both
 * addresses, so that an aligned 1-, 2-, 4- or 8-byte element is one typed
 * load and store and a 16-byte one two 8-byte ones (where memcpy of a size
 * known only at run time is a byte loop on the device); bytes when nothing
 * wider fits. One unit at a time: a value is a unit or two, and nothing else
 * is live. On the host memcpy is already that, and the unit branches would
 * be wrong there: inlined into a caller's get or put of a 4-byte local, GCC
 * sees the (dead) 8-byte branch read past the local and -Warray-bounds
 * fails the caller's -Werror build (issue 45; tests/user_warnings.sh). */
GPUMEM_API void gpumem_copy_value(void *dst, const void *src, uint32_t n) {
#if !GPUMEM_ON_DEVICE
    if (n) memcpy(dst, src, n);
#else
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    const uintptr_t both = (uintptr_t)d | (uintptr_t)s | n;
    uint32_t k;
    if ((both & 7u) == 0)
        for (k = 0; k < n / 8; k++) GPUMEM__COPY_UNIT(uint64_t, d, s, k);
    else if ((both & 3u) == 0)
        for (k = 0; k < n / 4; k++) GPUMEM__COPY_UNIT(uint32_t, d, s, k);
    else if ((both & 1u) == 0)
        for (k = 0; k < n / 2; k++) GPUMEM__COPY_UNIT(uint16_t, d, s, k);
    else
        for (k = 0; k < n; k++) d[k] = s[k];
#endif
}

/* ---- host-only hooks ----------------------------------------------------- */

#if !GPUMEM_ON_DEVICE
#ifndef GPUMEM_MALLOC
#include <stdlib.h>
#define GPUMEM_MALLOC(n) malloc(n)
#define GPUMEM_FREE(p) free(p)
#endif
#ifndef GPUMEM_LOG
#include <stdio.h>
#define GPUMEM_LOG(...) (fputs("gpumem: ", stderr), fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))
#endif
#include <stdarg.h>
#include <stdio.h>
/* Append printf-style text to buf (n bytes, kept NUL-terminated) at `at`;
 * returns the length the whole text would have (the diagnostics reports of
 * the pairs and controllers build on it). */
static inline size_t gpumem__appendf(char *buf, size_t n, size_t at, const char *fmt, ...) {
    va_list ap;
    int k;
    va_start(ap, fmt);
    k = vsnprintf(at < n ? buf + at : NULL, at < n ? n - at : 0, fmt, ap);
    va_end(ap);
    return at + (k > 0 ? (size_t)k : 0);
}
#endif

/* ---- CUDA host helpers ---------------------------------------------------- */

/* For the host side of a .cu file: a persistent kernel (a GPU controller, a
 * client that spins) must not be running when another kernel's module is
 * loaded. Lazy module loading (CUDA 12.2+ default, CUDA_MODULE_LOADING=LAZY)
 * loads a kernel's module at its first launch, and that load waits for the
 * device to go idle - which it never does while a persistent kernel runs.
 * Preload every kernel before the first persistent one starts. None of
 * these calls cudaMalloc or cudaFree, which wait for the whole device. */
#if defined(__CUDACC__)
/* Load each kernel's module now (cudaFuncGetAttributes loads it), so that a
 * later launch never waits for the device. kernels: the __global__ functions
 * as pointers, e.g. (const void *)my_kernel. GPUMEM_ESYS if CUDA refused. */
static inline gpumem_status gpumem_cuda_preload(const void *const *kernels, uint32_t n) {
    uint32_t i;
    if (n && !kernels) return GPUMEM_ENULL;
    for (i = 0; i < n; i++) {
        struct cudaFuncAttributes a;
        if (!kernels[i]) return GPUMEM_ENULL;
        if (cudaFuncGetAttributes(&a, kernels[i]) != cudaSuccess) return GPUMEM_ESYS;
    }
    return GPUMEM_OK;
}

/* 1 if modules load lazily, 0 if eagerly, -1 if the driver cannot say
 * (drivers before CUDA 11.7 have no lazy loading; a failed query). Treat -1
 * as lazy: taken for eager, a persistent kernel started with nothing
 * preloaded hangs every kernel first launched after it. Asks the driver
 * (cuModuleGetLoadingMode, found through the runtime: no -lcuda). A failed
 * lookup leaves no error behind for the next cudaGetLastError. */
static inline int gpumem_cuda_lazy_loading(void) {
    typedef int (*get_mode_fn)(int *mode); /* CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *) */
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    int mode = 0;
    cudaError_t e;
#if CUDART_VERSION >= 12050
    e = cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 11070, cudaEnableDefault, &q);
#else
    e = cudaGetDriverEntryPoint("cuModuleGetLoadingMode", &fn, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    if (q != cudaDriverEntryPointSuccess || !fn || ((get_mode_fn)fn)(&mode) != 0) return -1;
    return mode == 2 ? 1 : 0; /* CU_MODULE_LAZY_LOADING = 2, CU_MODULE_EAGER_LOADING = 1 */
}

/* Copy `bytes` from device (or any) memory to the host on a stream of its
 * own that waits for no other, so that it works while kernels run. */
static inline gpumem_status gpumem__cuda_peek(void *dst, const void *src, size_t bytes) {
    cudaStream_t s;
    gpumem_status st = GPUMEM_OK;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return GPUMEM_ESYS;
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
        st = GPUMEM_ESYS;
    cudaStreamDestroy(s);
    return st;
}
#endif /* __CUDACC__ */

#endif /* GPUMEM_H */
