/* Populating 256 MiB of anonymous memory writable (MADV_POPULATE_WRITE) on
 * 4 KiB pages or on transparent huge pages, then 20 M random byte
 * increments over it: what huge pages would give a large filter
 * (BENCHMARKS.md, sixty-second round). Run each mode a few times: the
 * first huge-page run may have to compact memory for its pages.
 *
 *   gcc -O2 benches/scratch/huge_populate.c -o /tmp/huge_populate
 *   for i in 1 2; do /tmp/huge_populate 0; /tmp/huge_populate 1; done
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t n = (size_t)256 << 20, huge_page = (size_t)2 << 20;
    int huge = argc > 1 ? atoi(argv[1]) : 0;
    char *p = mmap(0, n + huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    char *a = (char *)(((uintptr_t)p + huge_page - 1) & ~(uintptr_t)(huge_page - 1));
    if (huge)
        madvise(a, n, MADV_HUGEPAGE);
    double t0 = now();
    int rc = madvise(a, n, MADV_POPULATE_WRITE);
    double t1 = now();
    uint64_t x = 88172645463325252ULL;
    for (long i = 0; i < 20000000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        a[x % n]++;
    }
    double t2 = now();
    printf("huge=%d populate rc=%d %.1f ms, 20M random increments %.1f ms\n", huge, rc,
           (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    return 0;
}
