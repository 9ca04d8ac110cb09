/* Heap allocations of the calling thread, counted between alloc_count_start() and
 * alloc_count_stop(): this program's malloc family interposes glibc's for every library
 * of the process (libtether.so's Rust code allocates through libc's malloc), forwarding to
 * glibc's own entry points. Linked into the `alloc` variant of api_test only (not with the
 * sanitizers, which interpose malloc themselves). */
#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static __thread unsigned long long count;
static __thread int on;
/* The first ALLOC_CALLERS call sites (return addresses) of the counted allocations, so that a
 * program can tell the library's own from the CUDA driver's (dladdr at report time, never
 * inside malloc). */
#define ALLOC_CALLERS 64
static __thread void *callers[ALLOC_CALLERS];

void alloc_count_start(void) {
    count = 0;
    on = 1;
}

/* Copies the recorded call sites of the last counted span into `out` (at most `cap`) and
 * returns how many were recorded (at most ALLOC_CALLERS, fewer than the count when it is
 * larger). */
size_t alloc_count_callers(void **out, size_t cap) {
    size_t n = count < ALLOC_CALLERS ? (size_t)count : ALLOC_CALLERS;
    if (n > cap) n = cap;
    for (size_t i = 0; i < n; i++) out[i] = callers[i];
    return n;
}

unsigned long long alloc_count_stop(void) {
    on = 0;
    return count;
}

static void bump(void *caller) {
    if (!on) return;
    if (count < ALLOC_CALLERS) callers[count] = caller;
    count++;
}

void *malloc(size_t n) {
    bump(__builtin_return_address(0));
    return __libc_malloc(n);
}

void *calloc(size_t a, size_t b) {
    bump(__builtin_return_address(0));
    return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n) {
    bump(__builtin_return_address(0));
    return __libc_realloc(p, n);
}

void free(void *p) { __libc_free(p); }

void *memalign(size_t align, size_t n) {
    bump(__builtin_return_address(0));
    return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n) {
    bump(__builtin_return_address(0));
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
    bump(__builtin_return_address(0));
    void *p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
