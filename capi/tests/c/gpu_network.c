/* The named-tensor API's device buffers and a caller's CUDA stream, on a GPU (driven by
 * capi/tests/c_api.rs, reported ignored there without a GPU; runtime/gpu/capi-device-io.sh
 * runs it on the GPU host).
 *
 *   gpu_network BUNDLE [copy|mapped]
 *
 * One network of BUNDLE (every input f32) opened on CUDA device 0 with the given staging.
 * The reference: a deterministic pattern set through the host buffers, tether_network_run,
 * the outputs copied out. Then the same pattern written with cuMemcpyHtoDAsync to the
 * input's device buffer on the program's own stream, the host input buffers zeroed (a run
 * that read them would see zeros), the device outputs filled with 0xff bytes (NaN), the
 * run ordered on that stream with TETHER_MEMORY_DEVICE, the outputs read back with
 * cuMemcpyDtoHAsync on the stream, one cuStreamSynchronize: they must equal the
 * reference. Then TETHER_MEMORY_HOST on the stream (pattern in the host buffers again),
 * and a host run on zeros, which must differ (the input matters). Heap allocations of
 * this thread are counted (alloc_count.c, linked in) over 200 runs of each kind (after 50
 * uncounted ones) and over 100 `tether_detect` calls on a synthetic 640x480 RGB frame (the
 * bundle opened as a model on the same device, after 3 warm-up calls), each attributed by its
 * call site to libtether.so or to another library (the CUDA driver allocates for itself
 * inside cuGraphLaunch and friends): those of libtether.so must be 0, the GPU path's claim
 * repeated through C. Prints one JSON line; exit 1 on a mismatch.
 *
 * The CUDA driver is loaded with dlopen (no CUDA header or library at build time), as an
 * application using the runtime API would find it: the primary context of device 0.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tether/tether.h>

void alloc_count_start(void);
unsigned long long alloc_count_stop(void);
size_t alloc_count_callers(void **out, size_t cap);

/* Who made the allocations of the last counted span: `*own` those called from libtether.so
 * (the library's Rust code allocates through libc's malloc from inside it), `*unattributed`
 * those past the recorded call sites; the other libraries' names (the CUDA driver's own
 * mallocs) appended to `others`. */
static void attribute(unsigned long long total, unsigned long long *own, unsigned long long *unattributed,
                      char *others, size_t others_cap) {
    void *sites[64];
    size_t n = alloc_count_callers(sites, 64);
    *own = 0;
    *unattributed = total - n;
    for (size_t i = 0; i < n; i++) {
        Dl_info info;
        const char *name = dladdr(sites[i], &info) && info.dli_fname ? info.dli_fname : "?";
        const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
        if (strstr(base, "libtether")) {
            (*own)++;
        } else if (!strstr(others, base) && strlen(others) + strlen(base) + 2 < others_cap) {
            if (others[0]) strcat(others, " ");
            strcat(others, base);
        }
    }
}

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*primary_release)(CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*stream_synchronize)(CUstream);
    CUresult (*htod_async)(uint64_t, const void *, size_t, CUstream);
    CUresult (*dtoh_async)(void *, uint64_t, size_t, CUstream);
    CUresult (*memset_d8_async)(uint64_t, unsigned char, size_t, CUstream);
} cu;

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "gpu_network: libcuda.so.1 has no %s\n", name);
        exit(1);
    }
    return p;
}

static void load_driver(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "gpu_network: %s\n", dlerror());
        exit(1);
    }
    *(void **)&cu.init = sym(lib, "cuInit");
    *(void **)&cu.device_get = sym(lib, "cuDeviceGet");
    *(void **)&cu.primary_retain = sym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cu.primary_release = sym(lib, "cuDevicePrimaryCtxRelease_v2");
    *(void **)&cu.ctx_set_current = sym(lib, "cuCtxSetCurrent");
    *(void **)&cu.stream_create = sym(lib, "cuStreamCreate");
    *(void **)&cu.stream_destroy = sym(lib, "cuStreamDestroy_v2");
    *(void **)&cu.stream_synchronize = sym(lib, "cuStreamSynchronize");
    *(void **)&cu.htod_async = sym(lib, "cuMemcpyHtoDAsync_v2");
    *(void **)&cu.dtoh_async = sym(lib, "cuMemcpyDtoHAsync_v2");
    *(void **)&cu.memset_d8_async = sym(lib, "cuMemsetD8Async");
}

#define CU(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != 0) {                                                         \
            fprintf(stderr, "gpu_network: %s: CUresult %d\n", #call, r_);      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static void die(const char *what, int status) {
    fprintf(stderr, "gpu_network: %s: %s: %s\n", what, tether_status_name(status), tether_last_error());
    exit(1);
}

#define CHECK(call)                          \
    do {                                     \
        int s_ = (call);                     \
        if (s_ != TETHER_OK) die(#call, s_); \
    } while (0)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Largest |a - b| over n floats (NaN anywhere counts as infinite). */
static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: gpu_network BUNDLE [copy|mapped]\n");
        return 2;
    }
    const char *staging = argc == 3 ? argv[2] : "copy";
    load_driver();
    CU(cu.init(0));
    CUdevice dev;
    CU(cu.device_get(&dev, 0));
    CUcontext ctx;
    CU(cu.primary_retain(&ctx, dev));
    CU(cu.ctx_set_current(ctx));
    CUstream stream;
    CU(cu.stream_create(&stream, 1 /* CU_STREAM_NON_BLOCKING */));

    tether_options o;
    CHECK(tether_options_init(&o));
    o.device = TETHER_DEVICE_CUDA;
    o.device_index = 0;
    o.staging = strcmp(staging, "mapped") == 0 ? TETHER_STAGING_MAPPED : TETHER_STAGING_COPY;
    tether_network *net = NULL;
    CHECK(tether_network_open(argv[1], NULL, &o, &net));
    const char *engine = NULL;
    CHECK(tether_network_engine(net, &engine));

    size_t n_in = 0, n_out = 0;
    CHECK(tether_network_tensor_count(net, TETHER_IO_INPUT, &n_in));
    CHECK(tether_network_tensor_count(net, TETHER_IO_OUTPUT, &n_out));
    tether_tensor_info *ins = calloc(n_in, sizeof *ins), *outs = calloc(n_out, sizeof *outs);
    float **pattern = calloc(n_in, sizeof *pattern), **zeros = calloc(n_in, sizeof *zeros);
    float **ref = calloc(n_out, sizeof *ref), **got = calloc(n_out, sizeof *got);
    for (size_t i = 0; i < n_in; i++) {
        CHECK(tether_network_tensor(net, TETHER_IO_INPUT, i, &ins[i]));
        if (ins[i].dtype != TETHER_DTYPE_F32) {
            fprintf(stderr, "gpu_network: input %s is not f32\n", ins[i].name);
            return 1;
        }
        size_t n = ins[i].size / sizeof(float);
        pattern[i] = malloc(ins[i].size);
        zeros[i] = calloc(n, sizeof(float));
        for (size_t k = 0; k < n; k++) pattern[i][k] = (float)((k * 2654435761u) % 1000u) / 1000.0f;
    }
    for (size_t i = 0; i < n_out; i++) {
        CHECK(tether_network_tensor(net, TETHER_IO_OUTPUT, i, &outs[i]));
        ref[i] = malloc(outs[i].size);
        got[i] = malloc(outs[i].size);
    }

    /* The reference: host buffers, tether_network_run. */
    for (size_t i = 0; i < n_in; i++) CHECK(tether_network_set_input(net, ins[i].name, pattern[i], ins[i].size));
    CHECK(tether_network_run(net));
    size_t size = 0;
    for (size_t i = 0; i < n_out; i++)
        CHECK(tether_network_copy_output(net, outs[i].name, ref[i], outs[i].size, &size));

    /* Device I/O on the caller's stream; the host inputs zeroed, the device outputs NaN. */
    for (size_t i = 0; i < n_in; i++) {
        CHECK(tether_network_set_input(net, ins[i].name, zeros[i], ins[i].size));
        uint64_t address = 0;
        CHECK(tether_network_device_buffer(net, TETHER_IO_INPUT, ins[i].name, &address, &size));
        if (size != ins[i].size) {
            fprintf(stderr, "gpu_network: device input %s holds %zu bytes, %zu expected\n", ins[i].name, size,
                    ins[i].size);
            return 1;
        }
        CU(cu.htod_async(address, pattern[i], size, stream));
    }
    uint64_t *out_address = calloc(n_out, sizeof *out_address);
    for (size_t i = 0; i < n_out; i++) {
        CHECK(tether_network_device_buffer(net, TETHER_IO_OUTPUT, outs[i].name, &out_address[i], &size));
        CU(cu.memset_d8_async(out_address[i], 0xff, size, stream));
    }
    CHECK(tether_network_run_on_stream(net, stream, TETHER_MEMORY_DEVICE));
    for (size_t i = 0; i < n_out; i++) CU(cu.dtoh_async(got[i], out_address[i], outs[i].size, stream));
    CU(cu.stream_synchronize(stream));
    double device_diff = 0, max_abs = 0;
    size_t elements = 0;
    for (size_t i = 0; i < n_out; i++) {
        size_t n = outs[i].size / sizeof(float);
        double d = max_diff(got[i], ref[i], n);
        if (d > device_diff) device_diff = d;
        for (size_t k = 0; k < n; k++)
            if (fabs(ref[i][k]) > max_abs) max_abs = fabs(ref[i][k]);
        elements += n;
    }

    /* Host staging on the caller's stream: the pattern in the host buffers again. */
    for (size_t i = 0; i < n_in; i++) CHECK(tether_network_set_input(net, ins[i].name, pattern[i], ins[i].size));
    CHECK(tether_network_run_on_stream(net, stream, TETHER_MEMORY_HOST));
    CU(cu.stream_synchronize(stream));
    double host_stream_diff = 0;
    for (size_t i = 0; i < n_out; i++) {
        CHECK(tether_network_copy_output(net, outs[i].name, got[i], outs[i].size, &size));
        double d = max_diff(got[i], ref[i], outs[i].size / sizeof(float));
        if (d > host_stream_diff) host_stream_diff = d;
    }

    /* Per-run cost: 200 device-I/O runs on the stream, one wait; 200 host runs. */
    /* Warm-up outside the counts: 50 runs of each kind. */
    for (int r = 0; r < 50; r++) CHECK(tether_network_run_on_stream(net, stream, TETHER_MEMORY_DEVICE));
    CU(cu.stream_synchronize(stream));
    for (int r = 0; r < 50; r++) CHECK(tether_network_run(net));
    char others[256] = "";
    unsigned long long device_own, device_unattributed, host_own, host_unattributed;
    int runs = 200;
    double t0 = now_ms();
    alloc_count_start();
    for (int r = 0; r < runs; r++) CHECK(tether_network_run_on_stream(net, stream, TETHER_MEMORY_DEVICE));
    unsigned long long device_allocs = alloc_count_stop();
    attribute(device_allocs, &device_own, &device_unattributed, others, sizeof others);
    CU(cu.stream_synchronize(stream));
    double device_ms = (now_ms() - t0) / runs;
    t0 = now_ms();
    alloc_count_start();
    for (int r = 0; r < runs; r++) CHECK(tether_network_run(net));
    unsigned long long host_allocs = alloc_count_stop();
    attribute(host_allocs, &host_own, &host_unattributed, others, sizeof others);
    double host_ms = (now_ms() - t0) / runs;

    /* The input matters: zeros give other outputs. */
    for (size_t i = 0; i < n_in; i++) CHECK(tether_network_set_input(net, ins[i].name, zeros[i], ins[i].size));
    CHECK(tether_network_run(net));
    double zeros_diff = 0;
    for (size_t i = 0; i < n_out; i++) {
        CHECK(tether_network_copy_output(net, outs[i].name, got[i], outs[i].size, &size));
        double d = max_diff(got[i], ref[i], outs[i].size / sizeof(float));
        if (d > zeros_diff) zeros_diff = d;
    }

    /* The semantic call on the same device: detections of a synthetic frame, counted. */
    tether_model *model = NULL;
    CHECK(tether_model_open(argv[1], &o, &model));
    uint32_t fw = 640, fh = 480;
    uint8_t *frame = malloc((size_t)fw * fh * 3);
    if (!frame) {
        fprintf(stderr, "gpu_network: out of memory for a %ux%u frame\n", fw, fh);
        return 1;
    }
    for (uint32_t y = 0; y < fh; y++)
        for (uint32_t x = 0; x < fw * 3; x++) frame[(size_t)y * fw * 3 + x] = (uint8_t)((x * 7 + y * 3) ^ (x / 32 * 40));
    tether_image_view view = {frame, fw, fh, (size_t)fw * 3, TETHER_PIXEL_RGB8};
    tether_detection dets[300];
    size_t found = 0;
    for (int r = 0; r < 3; r++) CHECK(tether_detect(model, &view, dets, 300, &found));
    int detect_calls = 100;
    alloc_count_start();
    for (int r = 0; r < detect_calls; r++) CHECK(tether_detect(model, &view, dets, 300, &found));
    unsigned long long detect_allocs = alloc_count_stop();
    unsigned long long detect_own, detect_unattributed;
    attribute(detect_allocs, &detect_own, &detect_unattributed, others, sizeof others);
    const char *detect_engine = NULL;
    CHECK(tether_model_engine(model, &detect_engine));
    char detect_engine_name[32];
    snprintf(detect_engine_name, sizeof detect_engine_name, "%s", detect_engine);
    tether_model_close(model);
    free(frame);

    double tol = 1e-5 * (max_abs > 1 ? max_abs : 1);
    int ok = device_diff <= tol && host_stream_diff <= tol && zeros_diff > tol && device_own == 0 &&
             host_own == 0 && detect_own == 0 && device_unattributed == 0 && host_unattributed == 0 &&
             detect_unattributed == 0;
    printf("{\"engine\":\"%s\",\"staging\":\"%s\",\"outputs\":%zu,\"elements\":%zu,\"max_abs\":%.9g,"
           "\"device_io_max_diff\":%.9g,\"host_on_stream_max_diff\":%.9g,\"zeros_max_diff\":%.9g,"
           "\"tolerance\":%.9g,\"device_io_ms_per_run\":%.4f,\"host_run_ms\":%.4f,"
           "\"runs\":%d,\"device_io_allocations\":%llu,\"device_io_tether_allocations\":%llu,"
           "\"host_run_allocations\":%llu,\"host_run_tether_allocations\":%llu,"
           "\"detect_engine\":\"%s\",\"detect_calls\":%d,\"detect_allocations\":%llu,"
           "\"detect_tether_allocations\":%llu,\"unattributed_allocations\":%llu,"
           "\"other_allocating_libraries\":\"%s\",\"detections\":%zu,\"ok\":%s}\n",
           engine, staging, n_out, elements, max_abs, device_diff, host_stream_diff, zeros_diff, tol, device_ms,
           host_ms, runs, device_allocs, device_own, host_allocs, host_own, detect_engine_name, detect_calls,
           detect_allocs, detect_own, device_unattributed + host_unattributed + detect_unattributed, others, found,
           ok ? "true" : "false");

    tether_network_close(net);
    CU(cu.stream_destroy(stream));
    CU(cu.primary_release(dev));
    for (size_t i = 0; i < n_in; i++) {
        free(pattern[i]);
        free(zeros[i]);
    }
    for (size_t i = 0; i < n_out; i++) {
        free(ref[i]);
        free(got[i]);
    }
    free(ins);
    free(outs);
    free(pattern);
    free(zeros);
    free(ref);
    free(got);
    free(out_address);
    return ok ? 0 : 1;
}
