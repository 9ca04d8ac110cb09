// Session 41, issue 26: where a `layer` launch (families/llm/kernels/llm.cu, a whole
// Llama-style layer as one 16-block cluster) spends its time. Builds llm.cu with
// LAYER_PROFILE (thread 0 of each block stamps %globaltimer and clock64 at the phase
// boundaries) and runs 30 layers of the SmolLM2-135M shape (Q4_1 weights, width 576, 9 heads
// / 3 KV heads of 64, FFN 1,536) as one CUDA graph with programmatic dependent launches,
// at positions 128 and 2047: ms per 30 layers, then each phase's mean duration over the
// blocks of the middle layers and the gaps between one layer's end and the next one's wait.
// Synthetic weights (Q4_1 blocks with scale 1/64 and minimum -1/8, random nibbles) and cache
// rows: a timing harness, not a check of values (gpu_fuse does that).
//
//   nvcc -arch=sm_90 -O3 -std=c++17 -o layer-prof s41-layer-prof.cu && ./layer-prof
#define LAYER_PROFILE 1
#include "../../families/llm/kernels/llm.cu"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

constexpr int D = 576, F = 1536, NH = 9, NKV = 3, HD = 64, KV = NKV * HD, CTX = 2048, LAYERS = 30;

static int per_block(int n, int b) {
    const int per = (n + LAYER_CLUSTER - 1) / LAYER_CLUSTER;
    const int r0 = std::min(n, b * per);
    return std::min(n, r0 + per) - r0;
}

static int a16(int v) { return (v + 15) & ~15; }

// src/gpu/kernels.rs layer_slice_bytes / layer_dynamic_bytes for all-Q4_1 matrices.
static int slice_bytes() {
    const int rd = D / 32 * 20, rf = F / 32 * 20;
    int most = 0;
    for (int b = 0; b < LAYER_CLUSTER; ++b) {
        const int items = (NH + NKV) * HD / 2 + KV / 2;
        int off = a16(per_block(items, b) * 2 * rd);
        off = a16(off + per_block(D, b) * rd);
        off = a16(off + per_block(F, b) * rd);
        off = a16(off + per_block(F, b) * rd);
        most = std::max(most, a16(off + per_block(D, b) * rf));
    }
    return most;
}

static int dynamic_bytes(int slice) {
    const int widest = std::max(D, F);
    return slice + a16(widest / 32 * (int)sizeof(BlockQ8)) + a16(widest * 4) + (NH * HD + 2 * D + F) * 4;
}

static uint8_t* q41_matrix(int rows, int cols, unsigned seed) {
    const int rb = cols / 32 * 20;
    std::vector<uint8_t> h((size_t)rows * rb);
    srand(seed);
    const __half d = __float2half(1.0f / 64), m = __float2half(-1.0f / 8);
    for (int r = 0; r < rows; ++r)
        for (int u = 0; u < cols / 32; ++u) {
            uint8_t* b = &h[(size_t)r * rb + u * 20];
            memcpy(b, &d, 2);
            memcpy(b + 2, &m, 2);
            for (int k = 0; k < 16; ++k) b[4 + k] = (uint8_t)(rand() & 0xFF);
        }
    uint8_t* dev;
    CK(cudaMalloc(&dev, h.size()));
    CK(cudaMemcpy(dev, h.data(), h.size(), cudaMemcpyHostToDevice));
    return dev;
}

template <typename T>
static T* upload(const std::vector<T>& v) {
    T* dev;
    CK(cudaMalloc(&dev, v.size() * sizeof(T)));
    CK(cudaMemcpy(dev, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return dev;
}


// Micro-benchmarks of the prologue's parts on the values `x` holds (one block of
// FUSE_WARPS warps, 64 repetitions, clock64 ticks a call): rms_scale_block, rms_scale_seq,
// the bound of rms_scale_from (whether it needs the chain), prologue with a norm, and
// attend at two spans.
__global__ void __launch_bounds__(FUSE_WARPS * 32) micro(const float* x, const float* norm, int n,
                                                         const uint16_t* kc, const uint16_t* vc,
                                                         long long* out) {
    extern __shared__ __align__(16) unsigned char sm_[];
    float* xs = (float*)sm_;
    for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = x[i];
    __syncthreads();
    volatile float sink = 0.0f;
    long long t0 = clock64();
    for (int r = 0; r < 64; ++r) sink = sink + rms_scale_block(xs, n, 1e-5f);
    long long t1 = clock64();
    if (threadIdx.x == 0) out[0] = (t1 - t0) / 64;
    __syncthreads();
    if (threadIdx.x == 0) {
        t0 = clock64();
        for (int r = 0; r < 64; ++r) sink = sink + rms_scale_seq(xs, n, 1e-5f);
        t1 = clock64();
        out[1] = (t1 - t0) / 64;
        double t = 0.0;
        for (int i = 0; i < n; ++i) t = __dadd_rn(t, (double)__fmul_rn(xs[i], xs[i]));
        const double rel = (double)n * 0x1p-50;
        const float lo = __double2float_rn(__ddiv_rn(__dmul_rd(t, 1.0 - rel), (double)n));
        const float hi = __double2float_rn(__ddiv_rn(__dmul_ru(t, 1.0 + rel), (double)n));
        out[2] = isfinite(t) ? (lo == hi ? 1 : 2) : 3;
        out[7] = __double_as_longlong(t);
    }
    __syncthreads();
    unsigned char* pro = sm_ + 16384;
    BlockQ8* q8;
    BlockQ8K* q8k;
    float* px;
    // out[3]: with the norm, out[4]: without.
    for (int k = 0; k < 2; ++k) {
        t0 = clock64();
        for (int r = 0; r < 16; ++r) {
            PrologueParams in = {x, nullptr, k == 0 ? norm : nullptr, n, 1e-5f, 0, 1, 0, 0};
            prologue(in, pro, &q8, &q8k, &px);
        }
        t1 = clock64();
        if (threadIdx.x == 0) out[3 + k] = (t1 - t0) / 16;
    }
    __syncthreads();
    float* q = xs;
    float* o = xs + 1024;
    for (int len : {129, 2048}) {
        t0 = clock64();
        for (int r = 0; r < 8; ++r) {
            attend(q, kc, vc, KV, HD, len, 0.125f, false, 0, o);
            __syncthreads();
        }
        t1 = clock64();
        if (threadIdx.x == 0) out[len == 129 ? 5 : 6] = (t1 - t0) / 8;
    }
    if (threadIdx.x == 0 && sink == 12345.0f) out[8] = 1;
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
    const int slice = slice_bytes(), dyn = dynamic_bytes(slice);
    printf("layer: slice %d bytes, dynamic shared memory %d bytes a block\n", slice, dyn);
    CK(cudaFuncSetAttribute(layer, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(layer, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));

    std::vector<float> xs(D), ones(F, 1.0f), ang((size_t)CTX * HD);
    for (int i = 0; i < D; ++i) xs[i] = 0.01f * (float)((i * 37) % 101 - 50);
    for (int p = 0; p < CTX; ++p)
        for (int i = 0; i < HD / 2; ++i) {
            const float th = p * powf(10000.0f, -2.0f * i / HD);
            ang[(size_t)p * HD + i] = cosf(th);
            ang[(size_t)p * HD + HD / 2 + i] = sinf(th);
        }
    std::vector<__half> cache((size_t)CTX * KV);
    for (size_t i = 0; i < cache.size(); ++i) cache[i] = __float2half(0.01f * (float)((i * 13) % 41 - 20));
    float* x = upload(xs);
    float* norm = upload(ones);
    float* angles = upload(ang);
    DecodeState st = {0, 128, 0, 0};
    DecodeState* state;
    CK(cudaMalloc(&state, sizeof st));

    std::vector<LayerParams> lp(LAYERS);
    const int rows[7] = {D, KV, KV, D, F, F, D}, cols[7] = {D, D, D, D, D, D, F};
    for (int l = 0; l < LAYERS; ++l) {
        LayerParams& p = lp[l];
        memset(&p, 0, sizeof p);
        p.x = x;
        p.attn_norm = norm;
        p.ffn_norm = norm;
        for (int m = 0; m < 7; ++m) {
            p.m[m].w = q41_matrix(rows[m], cols[m], 1000u * l + m);
            p.m[m].type = T_Q4_1;
            p.m[m].row_bytes = cols[m] / 32 * 20;
        }
        p.angles = angles;
        p.state = state;
        p.kcache = (uint16_t*)upload(cache);
        p.vcache = (uint16_t*)upload(cache);
        p.width = D;
        p.ffn = F;
        p.n_head = NH;
        p.n_kv = NKV;
        p.head_dim = HD;
        p.form = ROPE_FUSED;
        p.eps = 1e-5f;
        p.scale = 0.125f;
        p.slice_bytes = slice;
        p.pad = l;
    }

    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // One cluster of LAYER_CLUSTER blocks; the launches add the dependent-launch attribute,
    // the occupancy query takes the cluster dimension alone.
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = LAYER_CLUSTER;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(LAYER_CLUSTER);
    cfg.blockDim = dim3(FUSE_WARPS * 32);
    cfg.dynamicSmemBytes = dyn;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    {
        int n = 0;
        CK(cudaOccupancyMaxActiveClusters(&n, layer, &cfg));
        printf("%d clusters resident at most\n", n);
    }
    cfg.numAttrs = 2;
    auto launch = [&](const LayerParams& p) { CK(cudaLaunchKernelEx(&cfg, layer, p)); };
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    static unsigned long long prof[64 * LAYER_CLUSTER * 16][2];
    // Without (kv_rows 0) and with the cache rows asked of L2 before the wait (session 43).
    // LAYER_PROF_ONE=<position> (for a profiler): with the L2 requests, that position, two
    // replays and one timed.
    const char* one = getenv("LAYER_PROF_ONE");
    const std::vector<int> kv_list = one ? std::vector<int>{CTX} : std::vector<int>{0, CTX};
    const std::vector<uint32_t> pos_list =
        one ? std::vector<uint32_t>{(uint32_t)atoi(one)} : std::vector<uint32_t>{128u, 1024u, 2047u};
    for (int kv_rows : kv_list) {
    for (int l = 0; l < LAYERS; ++l) lp[l].kv_rows = kv_rows;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < LAYERS; ++l) launch(lp[l]);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    printf("\n== kv_rows %d (%s)\n", kv_rows, kv_rows ? "cache rows asked of L2 before the wait" : "no cache prefetch");
    for (uint32_t pos : pos_list) {
        st.pos = pos;
        CK(cudaMemcpy(state, &st, sizeof st, cudaMemcpyHostToDevice));
        for (int i = 0; i < (one ? 2 : 20); ++i) CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        const int reps = one ? 1 : 300;
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaStreamSynchronize(s));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        printf("\nposition %u: %.4f ms per 30 layers (%.2f us a layer), graph replays back to back\n", pos,
               ms / reps, 1000.0f * ms / reps / LAYERS);
        // One replay alone, its stamps.
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpyFromSymbol(prof, layer_prof, sizeof prof));
        auto at = [&](int l, int b, int k, int w) { return prof[(l * LAYER_CLUSTER + b) * 16 + k][w]; };
        const char* names[] = {"entry -> wait returned", "wait -> prologue A done", "-> weights + cluster here",
                               "Q/K/V rows", "barrier A", "attention", "barrier B", "prologue C", "output rows",
                               "barrier C", "prologue D", "gate/up rows", "barrier D", "prologue E", "down rows"};
        const int order[] = {0, 1, 3, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        // clock64 ticks a microsecond: the SM clock seen over the whole launch of each block.
        double ticks = 0, ns = 0;
        for (int l = 5; l < 25; ++l)
            for (int b = 0; b < LAYER_CLUSTER; ++b) {
                ticks += (double)(at(l, b, 15, 1) - at(l, b, 0, 1));
                ns += (double)(at(l, b, 15, 0) - at(l, b, 0, 0));
            }
        const double mhz = ticks / ns * 1e3;
        printf("phase (mean over the blocks of layers 5..24; us from clock64 at %.0f MHz; max block)\n", mhz);
        for (int ph = 0; ph < 15; ++ph) {
            double sum = 0, mx = 0;
            int n = 0;
            for (int l = 5; l < 25; ++l)
                for (int b = 0; b < LAYER_CLUSTER; ++b) {
                    const double c = (double)(at(l, b, order[ph + 1], 1) - at(l, b, order[ph], 1));
                    sum += c;
                    mx = std::max(mx, c);
                    ++n;
                }
            printf("  %-28s %8.2f us  (max %8.2f)\n", names[ph], sum / n / mhz, mx / mhz);
        }
        // Layer timeline from %globaltimer (ns): the first entry, the last wait return and the
        // last end of each layer, relative to layer 0's first entry (of any block).
        unsigned long long t0 = ~0ull;
        for (int b = 0; b < LAYER_CLUSTER; ++b) t0 = std::min(t0, at(0, b, 0, 0));
        printf("layer  first entry  last wait-return  last end   (us from layer 0's entry)\n");
        for (int l = 0; l < LAYERS; ++l) {
            unsigned long long en = ~0ull, wr = 0, end = 0;
            for (int b = 0; b < LAYER_CLUSTER; ++b) {
                en = std::min(en, at(l, b, 0, 0));
                wr = std::max(wr, at(l, b, 1, 0));
                end = std::max(end, at(l, b, 15, 0));
            }
            if (l < 8 || l % 5 == 0 || l == LAYERS - 1)
                printf("%5d %12.2f %17.2f %9.2f\n", l, (en - t0) / 1e3, (wr - t0) / 1e3, (end - t0) / 1e3);
        }
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    }
    {
        long long* out;
        CK(cudaMalloc(&out, 16 * sizeof(long long)));
        CK(cudaMemset(out, 0, 16 * sizeof(long long)));
        CK(cudaFuncSetAttribute(micro, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
        for (int which = 0; which < 2; ++which) {
            // which 0: the residual the layers left; 1: fresh values of unit scale.
            if (which == 1) CK(cudaMemcpy(x, xs.data(), D * sizeof(float), cudaMemcpyHostToDevice));
            std::vector<float> hx(D);
            CK(cudaMemcpy(hx.data(), x, D * sizeof(float), cudaMemcpyDeviceToHost));
            micro<<<1, FUSE_WARPS * 32, 65536, s>>>(x, norm, D, lp[0].kcache, lp[0].vcache, out);
            CK(cudaStreamSynchronize(s));
            long long h[16];
            CK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
            double t;
            memcpy(&t, &h[7], 8);
            printf("\nmicro (%s; x[0..3] %g %g %g, sum of squares %g): ticks a call\n",
                   which == 0 ? "the residual after the replays" : "fresh x", hx[0], hx[1], hx[2], t);
            printf("  rms_scale_block %lld, rms_scale_seq %lld, bound: %s\n", h[0], h[1],
                   h[2] == 1 ? "tree suffices" : h[2] == 2 ? "needs the chain" : "not finite: the chain");
            printf("  prologue with norm %lld, without %lld\n", h[3], h[4]);
            printf("  attend len 129: %lld, len 2048: %lld\n", h[5], h[6]);
        }
    }
    return 0;
}
