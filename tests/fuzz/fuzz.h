/* tests/fuzz/fuzz.h - what the libFuzzer harnesses share (make fuzz;
 * tests/fuzz/README.md): a property check that stops the run with the
 * property in words, and a reader of the input's bytes.
 *
 * A harness checks more than "no crash": each one states what must hold
 * for every input (an error names its place, nothing is left behind, the
 * JSON parses, every completion is delivered once...) and FUZZ_CHECK turns
 * a violation into a crash that libFuzzer saves as an artifact. */
#ifndef GPUMEM_TESTS_FUZZ_H
#define GPUMEM_TESTS_FUZZ_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

/* libFuzzer's entry point: every harness defines it. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                          \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "\n%s:%d: property violated: %s\n  ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
            abort();                                                                   \
        }                                                                              \
    } while (0)

/* The input as a stream of choices: a byte, a 16-bit number, a span; past
 * the end, zeros (so every input is a whole script). */
typedef struct fuzz_bytes {
    const uint8_t *p;
    size_t n, at;
} fuzz_bytes;

static inline unsigned fuzz_u8(fuzz_bytes *b) { return b->at < b->n ? b->p[b->at++] : 0u; }
static inline unsigned fuzz_u16(fuzz_bytes *b) {
    unsigned lo = fuzz_u8(b);
    return lo | fuzz_u8(b) << 8;
}
static inline int fuzz_more(const fuzz_bytes *b) { return b->at < b->n; }
/* Up to `want` bytes of the rest (fewer at the end); *got says how many. */
static inline const uint8_t *fuzz_span(fuzz_bytes *b, size_t want, size_t *got) {
    const uint8_t *p = b->p + b->at;
    *got = b->n - b->at < want ? b->n - b->at : want;
    b->at += *got;
    return p;
}

/* Remove `path` and, if it is a directory, all below it (never following a
 * link: a link is removed, not what it names). Errors are ignored: this is
 * a harness's own scratch space. */
static inline void fuzz_remove_tree(const char *path) {
    struct stat sb;
    DIR *d;
    struct dirent *e;
    char sub[4096];
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode) && (d = opendir(path)) != NULL) {
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) < (int)sizeof sub) fuzz_remove_tree(sub);
        }
        closedir(d);
        (void)rmdir(path);
    } else {
        (void)unlink(path);
    }
}

static char fuzz_tmpdir_made[300];
static void fuzz_tmpdir_remove(void) { fuzz_remove_tree(fuzz_tmpdir_made); }

/* A directory of the harness's own, made once: under $FUZZ_TMPDIR, else
 * /dev/shm where it can be written (a tmpfs: the harnesses make and remove
 * files by the thousand, and a disk's metadata writes and fsyncs slowed
 * the doctor's to a few inputs a second), else /tmp. */
static inline void fuzz_tmpdir(char *out, size_t cap, const char *tag) {
    const char *where = getenv("FUZZ_TMPDIR");
    if (!where || !*where) where = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(out, cap, "%s/gpumem-fuzz-%s-XXXXXX", where, tag);
    if (!mkdtemp(out)) {
        fprintf(stderr, "fuzz: cannot make %s\n", out);
        abort();
    }
    /* libFuzzer ends a campaign with exit(): the directory goes with it */
    snprintf(fuzz_tmpdir_made, sizeof fuzz_tmpdir_made, "%s", out);
    atexit(fuzz_tmpdir_remove);
}

/* Write n bytes to path (replacing it); 0 on success. */
static inline int fuzz_write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return -1;
    ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

#endif
