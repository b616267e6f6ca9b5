/* The QEMU conformance test, host side: the disk image of known content.
 *
 *   image create FILE BLOCKS   every 512-byte block holds (lba, generation 0)
 *   image check FILE CONSOLE   after the guest has powered off: every block
 *                              holds the generation the guest reported for it
 *                              in "GENS <first lba> <gen> <gen> ..." lines of
 *                              its console output, and every other block still
 *                              holds generation 0.
 * Exit status 0 only if every block is right. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../block_content.h"

static int create(const char *path, uint64_t blocks) {
    FILE *f = fopen(path, "wb");
    unsigned char b[LBA];
    uint64_t lba;
    if (!f) {
        perror(path);
        return 1;
    }
    for (lba = 0; lba < blocks; lba++) {
        fill_block(b, lba, 0);
        if (fwrite(b, LBA, 1, f) != 1) {
            perror(path);
            return 1;
        }
    }
    return fclose(f) == 0 ? 0 : 1;
}

static int check(const char *path, const char *console) {
    FILE *img = fopen(path, "rb"), *log = fopen(console, "r");
    uint32_t *gen;
    uint64_t blocks, lba, reported = 0, written = 0, bad = 0;
    unsigned char b[LBA];
    char line[4096];
    if (!img || !log) {
        perror(!img ? path : console);
        return 1;
    }
    fseek(img, 0, SEEK_END);
    blocks = (uint64_t)ftell(img) / LBA;
    rewind(img);
    gen = (uint32_t *)calloc(blocks, sizeof *gen);
    while (fgets(line, sizeof line, log)) {
        char *p = strstr(line, "GENS "), *end;
        if (!p) continue;
        lba = strtoull(p + 5, &end, 10);
        for (p = end;; p = end) {
            unsigned long g = strtoul(p, &end, 16);
            if (end == p) break;
            if (lba >= blocks) {
                fprintf(stderr, "image check: the guest reported block %llu of %llu\n", (unsigned long long)lba,
                        (unsigned long long)blocks);
                return 1;
            }
            gen[lba++] = (uint32_t)g;
            reported++;
            written += g != 0;
        }
    }
    if (reported == 0) {
        fprintf(stderr, "image check: no GENS lines in %s\n", console);
        return 1;
    }
    for (lba = 0; lba < blocks; lba++) {
        if (fread(b, LBA, 1, img) != 1) {
            perror(path);
            return 1;
        }
        if (!block_ok(b, lba, gen[lba]) && bad++ < 10)
            fprintf(stderr, "image check: block %llu does not hold generation %u\n", (unsigned long long)lba,
                    gen[lba]);
    }
    printf("image check: %llu blocks, %llu reported by the guest, %llu of them written; %llu wrong\n",
           (unsigned long long)blocks, (unsigned long long)reported, (unsigned long long)written,
           (unsigned long long)bad);
    return bad == 0 && written > 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "create") == 0) return create(argv[2], strtoull(argv[3], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "check") == 0) return check(argv[2], argv[3]);
    fprintf(stderr, "usage: image create FILE BLOCKS | image check FILE CONSOLE_LOG\n");
    return 2;
}
