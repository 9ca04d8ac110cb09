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

void alloc_count_start(void) {
    count = 0;
    on = 1;
}

unsigned long long alloc_count_stop(void) {
    on = 0;
    return count;
}

static void bump(void) {
    if (on) count++;
}

void *malloc(size_t n) {
    bump();
    return __libc_malloc(n);
}

void *calloc(size_t a, size_t b) {
    bump();
    return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n) {
    bump();
    return __libc_realloc(p, n);
}

void free(void *p) { __libc_free(p); }

void *memalign(size_t align, size_t n) {
    bump();
    return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n) {
    bump();
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
    bump();
    void *p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
