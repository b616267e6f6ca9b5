/* LD_PRELOAD=build/fake_statvfs.so GPUMEM_FAKE_FREE_BYTES=N PROGRAM: every
 * statvfs says the file system has N bytes free (4 KiB blocks), so that a
 * test can show what a program does on a full disk without filling one
 * (tests/test_graph.c: the converter refuses a graph that does not fit).
 * Without the variable the calls report a failure (ENOSYS), never this
 * machine's numbers: a test that forgot it cannot pass by chance. (On
 * x86-64 glibc statvfs64 is the same function; nothing else is replaced.) */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

static int fake(struct statvfs *out) {
    const char *n = getenv("GPUMEM_FAKE_FREE_BYTES");
    if (!n || !out) {
        errno = ENOSYS;
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->f_bsize = out->f_frsize = 4096;
    out->f_bavail = out->f_bfree = strtoull(n, NULL, 10) / 4096;
    out->f_blocks = out->f_bfree + 1;
    out->f_namemax = 255;
    return 0;
}

int statvfs(const char *path, struct statvfs *out) {
    (void)path;
    return fake(out);
}

int fstatvfs(int fd, struct statvfs *out) {
    (void)fd;
    return fake(out);
}
