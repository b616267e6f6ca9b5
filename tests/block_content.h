/* The content of a test block, shared by every test that checks data by
 * content: the Criterion suite, the sanitizer driver, and the QEMU
 * conformance test (guest program and host image checker). Each block holds
 * (lba, generation, a fill derived from both), so a read of another block, a
 * stale generation or torn data is caught. */
#ifndef GPUMEM_TEST_BLOCK_CONTENT_H
#define GPUMEM_TEST_BLOCK_CONTENT_H

#include <stdint.h>
#include <string.h>

#define LBA 512u

/* The content of block `lba` at write generation `gen`. */
static inline void fill_block(unsigned char *b, uint64_t lba, uint32_t gen) {
    uint32_t i;
    memcpy(b, &lba, 8);
    memcpy(b + 8, &gen, 4);
    for (i = 12; i < LBA; i++) b[i] = (unsigned char)(lba * 31 + gen * 7 + i);
}

static inline int block_ok(const unsigned char *b, uint64_t lba, uint32_t gen) {
    unsigned char want[LBA];
    fill_block(want, lba, gen);
    return memcmp(b, want, LBA) == 0;
}

#endif
