/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_watchdog.h - a bound for runs that may hang (host, POSIX threads).
 *
 * A GPU kernel that waits forever cannot be cancelled, and a controller that
 * stops answering leaves its clients waiting: "a GPU run that can hang will"
 * (docs/gpu.md). The watchdog is a host thread that watches a
 * progress count and, when it has not moved for stall_ms, says so, stops
 * the controllers, prints the state of every queue pair, and ends the
 * process with exit_code (_exit, so that no exit handler waits on the hung
 * device; exit_code -1 only reports). It knows no controller: the hooks say
 * what progress is, how to stop, and what to report, so it watches any of
 * them (gpumem_swctl_watchdog_config in gpumem_swctl.h fills them for a
 * software controller; gpumem_nvme_qp_report is the usual report).
 *
 * USAGE
 *
 *   #define _POSIX_C_SOURCE 200809L
 *   #define GPUMEM_IMPLEMENTATION        // in exactly one .c file
 *   #include "gpumem_watchdog.h"
 *
 *   // given: uint64_t (*progress)(void *), void (*stop)(void *), size_t (*report)(void *, char *, size_t), void *ctx
 *   gpumem_watchdog_config w = gpumem_watchdog_config_make("my run", 10000, progress, stop, report, ctx);
 *   gpumem_watchdog *wd;
 *   if (gpumem_watchdog_start(&w, &wd) == GPUMEM_OK) {
 *       // ... the run ...
 *       gpumem_watchdog_finish(wd);   // before stopping the controller
 *   }
 *
 * GPUMEM_NO_HOST_SHIM leaves it out (device-only builds).
 */
#ifndef GPUMEM_WATCHDOG_H
#define GPUMEM_WATCHDOG_H

#include "gpumem.h"

#if !defined(GPUMEM_NO_HOST_SHIM)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpumem_watchdog_config {
    const char *what;                  /* names the run in the message */
    uint32_t stall_ms;                 /* no progress for this long is a stall (0: 10000) */
    uint64_t (*progress)(void *ctx);   /* a count that grows while work gets done */
    void (*stop)(void *ctx);           /* stop the controllers (NULL: nothing to stop) */
    size_t (*report)(void *ctx, char *buf, size_t n); /* the state in words (NULL: none) */
    void *ctx;
    int exit_code;                     /* on a stall: exit status (0 means 3); -1: do not end the
                                          process, only report (gpumem_watchdog_finish says so) */
} gpumem_watchdog_config;
typedef struct gpumem_watchdog gpumem_watchdog;
/* A configuration with those hooks (exit_code 0: status 3 on a stall). */
gpumem_watchdog_config gpumem_watchdog_config_make(const char *what, uint32_t stall_ms,
                                                   uint64_t (*progress)(void *), void (*stop)(void *),
                                                   size_t (*report)(void *, char *, size_t), void *ctx);
gpumem_status gpumem_watchdog_start(const gpumem_watchdog_config *cfg, gpumem_watchdog **out);
/* Stop watching and free it; returns 1 if it saw a stall (exit_code -1), else 0. */
int gpumem_watchdog_finish(gpumem_watchdog *wd);

#ifdef __cplusplus
}
#endif

#if defined(GPUMEM_IMPLEMENTATION) && !GPUMEM_ON_DEVICE

#if defined(__STRICT_ANSI__) && !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(__cplusplus)
#error "gpumem host shim: define _POSIX_C_SOURCE 200809L before the first #include (see gpumem_watchdog.h)"
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h> /* malloc: the watchdog's private memory */
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- watchdog ---------------------------------------------------------------- */

struct gpumem_watchdog {
    gpumem_watchdog_config cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int done;  /* under lock: finish asked */
    int fired; /* under lock */
};

static void gpumem__watchdog_fire(gpumem_watchdog *w, uint64_t count, uint64_t stalled_ms) {
    const size_t n = 1u << 20;
    /* Plain malloc here and for the watchdog itself: private host memory,
     * and GPUMEM_MALLOC may be a CUDA allocator that waits on a hung device. */
    char *text = (char *)malloc(n);
    GPUMEM_LOG("watchdog: %s: no progress for %llu ms (progress count stuck at %llu): stopping the controller; "
               "state of every queue pair follows",
               w->cfg.what ? w->cfg.what : "run", (unsigned long long)stalled_ms, (unsigned long long)count);
    if (w->cfg.stop) w->cfg.stop(w->cfg.ctx);
    if (w->cfg.report && text) {
        text[0] = 0;
        w->cfg.report(w->cfg.ctx, text, n);
        fputs(text, stderr);
    }
    free(text);
    fflush(NULL);
    if (w->cfg.exit_code >= 0) {
        GPUMEM_LOG("watchdog: %s: stalled; exiting with status %d", w->cfg.what ? w->cfg.what : "run",
                   w->cfg.exit_code ? w->cfg.exit_code : 3);
        _exit(w->cfg.exit_code ? w->cfg.exit_code : 3);
    }
}

static void *gpumem__watchdog_main(void *arg) {
    gpumem_watchdog *w = (gpumem_watchdog *)arg;
    const uint64_t stall_ns = (uint64_t)(w->cfg.stall_ms ? w->cfg.stall_ms : 10000u) * 1000000ull;
    const uint64_t tick_ns = stall_ns / 20 < 100000000ull ? stall_ns / 20 + 1 : 100000000ull;
    uint64_t seen = w->cfg.progress(w->cfg.ctx), since = gpumem_clock_ns();
    pthread_mutex_lock(&w->lock);
    while (!w->done) {
        struct timespec until;
        uint64_t now, count;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)(tick_ns % 1000000000ull);
        until.tv_sec += (time_t)(tick_ns / 1000000000ull) + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&w->wake, &w->lock, &until);
        if (w->done) break;
        count = w->cfg.progress(w->cfg.ctx);
        now = gpumem_clock_ns();
        if (count != seen) {
            seen = count;
            since = now;
        } else if (now - since >= stall_ns) {
            w->fired = 1;
            pthread_mutex_unlock(&w->lock);
            gpumem__watchdog_fire(w, count, (now - since) / 1000000ull);
            return NULL; /* exit_code -1: report once, then stop watching */
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

gpumem_status gpumem_watchdog_start(const gpumem_watchdog_config *cfg, gpumem_watchdog **out) {
    gpumem_watchdog *w;
    int rc;
    if (!cfg || !out || !cfg->progress) return GPUMEM_ENULL;
    *out = NULL;
    if (cfg->exit_code < -1 || cfg->exit_code > 255) return GPUMEM_EINVAL;
    w = (gpumem_watchdog *)malloc(sizeof *w);
    if (!w) return GPUMEM_ENOMEM;
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    if ((rc = pthread_create(&w->thread, NULL, gpumem__watchdog_main, w)) != 0) {
        GPUMEM_LOG("watchdog: pthread_create failed: %s", strerror(rc));
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return GPUMEM_ESYS;
    }
    *out = w;
    return GPUMEM_OK;
}

int gpumem_watchdog_finish(gpumem_watchdog *w) {
    int fired;
    if (!w) return 0;
    pthread_mutex_lock(&w->lock);
    w->done = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    fired = w->fired;
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return fired;
}

gpumem_watchdog_config gpumem_watchdog_config_make(const char *what, uint32_t stall_ms,
                                                   uint64_t (*progress)(void *), void (*stop)(void *),
                                                   size_t (*report)(void *, char *, size_t), void *ctx) {
    gpumem_watchdog_config w;
    memset(&w, 0, sizeof w);
    w.what = what;
    w.stall_ms = stall_ms;
    w.progress = progress;
    w.stop = stop;
    w.report = report;
    w.ctx = ctx;
    return w;
}

#endif /* GPUMEM_IMPLEMENTATION */
#endif /* host shim */

#endif /* GPUMEM_WATCHDOG_H */
