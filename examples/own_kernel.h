/* SPDX-License-Identifier: MIT */
/* own_kernel.h: what examples/own_kernel.c (host threads) and
 * examples/cuda/own_kernel.cu (a CUDA kernel) share: the data set, a file of
 * n 4-byte floats followed by room for n results, and how many cache slots
 * a run needs (docs/cuda.md). Include after gpumem_cache.h. */
#ifndef GPUMEM_EXAMPLES_OWN_KERNEL_H
#define GPUMEM_EXAMPLES_OWN_KERNEL_H
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define OWN_LINE 4096u              /* cache line = the controller's block */
#define OWN_PAIRS 4                 /* queue pairs, striped by line */
#define OWN_BLOCK 256u              /* threads a block (CUDA) */
#define OWN_RETRY_NS 30000000000ull /* give up on a cache that stays full for 30 s (DeviceRetry's bound) */

/* Element i of the input, and what the kernel makes of it (exact in float). */
GPUMEM_HD static inline float own_input(uint64_t i) { return (float)(i % 1000003u) * 0.5f; }
GPUMEM_HD static inline float own_output(float x) { return 2.0f * x + 1.0f; }

/* Slots: a warp (or a host thread) holds at most two lines at once, its
 * input's and its output's, so two per resident warp (holder) always leave
 * one free for a filler; and at least an eighth of the data, for reuse.
 * Fewer work too, but then accesses meet GPUMEM_EAGAIN and retry. */
static inline uint32_t own_slots(uint64_t holders, uint64_t n_lines) {
    uint64_t s = 2 * holders > n_lines / 8 ? 2 * holders : n_lines / 8;
    if (s > n_lines) s = n_lines;
    return (uint32_t)(s < 2 ? 2 : s);
}

/* Write the input (n floats) and zeroed room for the output to `path`; the
 * open file, or -1 after a message. */
static int own_write_input(const char *path, uint64_t n) {
    enum { CHUNK = 65536 };
    static float buf[CHUNK];
    uint64_t i, k;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)(2 * n * 4)) != 0) {
        perror(path);
        if (fd >= 0) close(fd);
        return -1;
    }
    for (i = 0; i < n; i += k) {
        k = n - i < CHUNK ? n - i : CHUNK;
        for (uint64_t j = 0; j < k; j++) buf[j] = own_input(i + j);
        if (pwrite(fd, buf, (size_t)k * 4, (off_t)(i * 4)) != (ssize_t)(k * 4)) {
            perror(path);
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* Output values in the file (elements n .. 2n - 1) that are not
 * own_output(own_input(i)); a read error counts all of them. */
static uint64_t own_check_output(int fd, uint64_t n) {
    enum { CHUNK = 65536 };
    static float buf[CHUNK];
    uint64_t i, k, wrong = 0;
    for (i = 0; i < n; i += k) {
        k = n - i < CHUNK ? n - i : CHUNK;
        if (pread(fd, buf, (size_t)k * 4, (off_t)((n + i) * 4)) != (ssize_t)(k * 4)) return n;
        for (uint64_t j = 0; j < k; j++) wrong += buf[j] != own_output(own_input(i + j));
    }
    return wrong;
}
#endif
