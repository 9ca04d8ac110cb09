// tether text-generation family: batch-1 decode kernels (issue 26).
//
// Built ahead of time by `runtime/kernels/build-kernels.sh families/llm/kernels/llm.cu` for
// sm_87, sm_90, sm_100 and sm_110 (CUDA 13 fatbin) and sm_87/90/100 (CUDA 12 cubins),
// embedded in the `tether-llm` crate (feature `cuda`, src/gpu/kernels.rs).
//
// `src/gpu/` lowers the forward pass's `Program` (src/forward.rs) to these kernels, one
// launch list per decode step, captured as ONE CUDA graph at load. Every kernel that depends
// on the position reads it from the request state (`DecodeState`) in device memory, so the
// same graph serves every position; the last kernel (`sample_advance`) chooses the token
// (greedy or sampled, per the request's `SampleConfig` in device memory), writes it and
// advances the position on the device.
//
// Arithmetic mirrors the CPU engine's scalar references (src/quant.rs `dot_ref`,
// `quantize_block_q8`, `quantize_block_q8k`, `dequantize_row`; src/forward.rs RMSNorm, RoPE,
// SwiGLU): activations are quantised to 8-bit blocks exactly as ggml / the CPU engine do
// (ties to even, scales through f16), the integer block sums are exact, and every f32 and f64
// addition is the CPU engine's, in its order (or, for the norms' f64 sums, a tree proved to
// give the same result: `rms_scale_from`), so the logits are the CPU engine's bit for bit.
//
// Every kernel takes ONE parameter struct by value, mirrored `#[repr(C)]` in
// src/gpu/kernels.rs.
#ifdef __CUDACC_RTC__
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef short int16_t;
typedef unsigned int uint32_t;
#else
#include <stdint.h>
#endif

// ggml_type ids (GGUF numbering), as src/quant.rs `TensorType::ggml_id`.
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q6_K 14
#define T_BF16 30

#define QK 32
#define QK_K 256
#define MAX_HEAD_DIM 256
#define ATTN_WARPS 8
#define ATTN_SPLITS 16
#define PREP_THREADS 1024
#define MV_WARPS 4
#define NEG_INF __int_as_float(0xff800000)

// The request state: one per generator, in device memory (mirrors `DecodeState` in
// src/gpu/kernels.rs).
struct DecodeState {
    uint32_t token;       // the last chosen token (sample_advance), input of the next step
    uint32_t pos;         // position of the token the next step processes
    uint32_t prompt_len;  // while pos < prompt_len the step reads prompt[pos] instead of token
    uint32_t bad_token;   // 1 + the first out-of-vocabulary id seen by embed (0: none)
};

// Activations quantised per 32 values (ggml block_q8_1, unpacked): x ~= d * qs, s = f16(d * sum qs).
struct BlockQ8 {
    float d;
    float s;
    int8_t qs[QK];
};

// Activations quantised per 256 values (ggml block_q8_K).
struct BlockQ8K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};

__device__ __forceinline__ float h2f(uint16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ uint16_t f2h(float f) {
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float round_f16(float f) { return h2f(f2h(f)); }

__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float(((uint32_t)h) << 16); }

__device__ __forceinline__ uint16_t ld16(const uint8_t* p) {
    return (uint16_t)p[0] | ((uint16_t)p[1] << 8);
}

// Four bytes at a 2-byte aligned address as one little-endian word.
__device__ __forceinline__ int ld32_2(const uint8_t* p) {
    return (int)((uint32_t)ld16(p) | ((uint32_t)ld16(p + 2) << 16));
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ int warp_sum_i(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// ---------------------------------------------------------------------------------------
// The CPU engine's arithmetic (src/kernels/scalar.rs, src/forward.rs), operation for
// operation: every device function below names the CPU function it mirrors. With them the
// GPU's logits equal the CPU engine's bit for bit (tests/gpu_numerics.rs).
// ---------------------------------------------------------------------------------------

// e^x as ggml's `ggml_v_expf` (Arm Optimized Routines `v_expf`): scalar.rs `exp`.
__device__ __forceinline__ float ggml_exp(float x) {
    const float SHIFT = __int_as_float(0x4b400000);
    const float INV_LN2 = __int_as_float(0x3fb8aa3b);
    const float LN2_HI = __int_as_float(0x3f317200);
    const float LN2_LO = __int_as_float(0x35bfbe8e);
    const float C1 = __int_as_float(0x3f7ffff6);
    const float C2 = __int_as_float(0x3efffedb);
    const float C3 = __int_as_float(0x3e2aaf33);
    const float C4 = __int_as_float(0x3d2b9f17);
    const float C5 = __int_as_float(0x3c072010);
    const float z = __fmaf_rn(x, INV_LN2, SHIFT);
    const float n = __fsub_rn(z, SHIFT);
    const float b = __fmaf_rn(-n, LN2_LO, __fmaf_rn(-n, LN2_HI, x));
    const uint32_t e = __float_as_uint(z) << 23;
    const float k = __uint_as_float(e + __float_as_uint(1.0f));
    const float u = __fmul_rn(b, b);
    const float j = __fmaf_rn(__fmaf_rn(__fmaf_rn(C5, b, C4), u, __fmaf_rn(C3, b, C2)), u,
                              __fmul_rn(C1, b));
    if (fabsf(n) <= 126.0f) return __fmaf_rn(j, k, k);
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = __uint_as_float(g + 0x7f000000u);
    const float s2 = __uint_as_float(e - g);
    if (fabsf(n) > 192.0f) return __fmul_rn(s1, s1);
    return __fmul_rn(__fmaf_rn(s2, j, s2), s1);
}

// silu(g) * u: scalar.rs `silu_mul` (g / (1 + exp(-g)) * u).
__device__ __forceinline__ float silu_mul(float g, float u) {
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, ggml_exp(-g))), u);
}

// The fixed sum of 8 lanes held by the 8 consecutive lanes of a group (lane & 7 = lane
// index): scalar.rs `hsum8`, t_i = l_i + l_{i+4}, then (t_0 + t_2) + (t_1 + t_3); every lane
// of the group gets the sum. All 32 lanes of the warp must call it.
__device__ __forceinline__ float hsum8_group(float v) {
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return v;
}

// The sum of 32 slots, slot = lane: scalar.rs `reduce_gemv` (r_l = (s_l + s_{16+l}) +
// (s_{8+l} + s_{24+l}), t_i = r_i + r_{i+4}, (t_0 + t_1) + (t_2 + t_3)); lane 0 gets it.
__device__ __forceinline__ float reduce_gemv_warp(float v) {
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 16));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 8));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return v;
}

// 1 / sqrt(mean(x^2) + eps) of n values: forward.rs `rms_scale` (each square in f32, their
// sum in f64 in index order, the mean rounded to f32). One thread: the f64 sum is one chain.
__device__ float rms_scale_seq(const float* x, int n, float eps) {
    double ss = 0.0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        double v[16];
#pragma unroll
        for (int k = 0; k < 16; ++k) v[k] = (double)__fmul_rn(x[i + k], x[i + k]);
#pragma unroll
        for (int k = 0; k < 16; ++k) ss = __dadd_rn(ss, v[k]);
    }
    for (; i < n; ++i) ss = __dadd_rn(ss, (double)__fmul_rn(x[i], x[i]));
    const float mean = __double2float_rn(__ddiv_rn(ss, (double)n));
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// `rms_scale_seq`'s result from `t`, the same squares summed in ANY order (a tree), without
// the chain when that is provably the same. Both sums are of n terms >= 0 in f64 (no
// underflow: an f32 square is 0 or >= 2^-149), so each is within gamma_(n-1) * S of the exact sum S
// (each term passes through at most n - 1 roundings, in any order of summation: Higham,
// "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2, Lemma 3.1), hence
// |chain - t| <= 2 gamma_(n-1) S <= 2 gamma_(n-1) t / (1 - gamma_(n-1)) < n * 2^-50 * t. Division by n and the
// rounding to f32 are monotone, so when both ends of [t (1 - n 2^-50), t (1 + n 2^-50)] give
// the same f32 mean, the chain's mean is that one too. Otherwise (roughly n * 2^-25 of the
// time) and for a sum that is not finite, the chain itself runs. One thread calls it.
__device__ float rms_scale_from(double t, const float* x, int n, float eps) {
    const double rel = (double)n * 0x1p-50;
    const float lo = __double2float_rn(__ddiv_rn(__dmul_rd(t, 1.0 - rel), (double)n));
    const float hi = __double2float_rn(__ddiv_rn(__dmul_ru(t, 1.0 + rel), (double)n));
    if (!isfinite(t) || lo != hi) return rms_scale_seq(x, n, eps);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(lo, eps)));
}

// `rms_scale_seq` of n values with every thread of the block (all must call it; the values
// are readable by all after a barrier): per-thread sums, warp trees, then the warps' sums in
// one thread, finished by `rms_scale_from`. Every thread gets the scale.
__device__ float rms_scale_block(const float* x, int n, float eps) {
    __shared__ double s_part[32];
    __shared__ float s_scale;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss = __dadd_rn(ss, (double)__fmul_rn(x[i], x[i]));
    for (int o = 16; o > 0; o >>= 1) ss = __dadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    if (lane == 0) s_part[warp] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < nw; ++k) t = __dadd_rn(t, s_part[k]);
        s_scale = rms_scale_from(t, x, n, eps);
    }
    __syncthreads();
    return s_scale;
}

// `rms_scale_seq` of n values with the 32 lanes of a warp (all must call it); every lane
// gets the scale.
__device__ float rms_scale_warp(const float* x, int n, float eps) {
    const int lane = threadIdx.x % 32;
    double ss = 0.0;
    for (int i = lane; i < n; i += 32) ss = __dadd_rn(ss, (double)__fmul_rn(x[i], x[i]));
    for (int o = 16; o > 0; o >>= 1) ss = __dadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    const float scale = lane == 0 ? rms_scale_from(ss, x, n, eps) : 0.0f;
    return __shfl_sync(0xffffffffu, scale, 0);
}

// Q4_K sub-block j's 6-bit scale and minimum (ggml get_scale_min_k4; src/quant.rs q4k_scale_min).
__device__ __forceinline__ void q4k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q6_K: the signed 6-bit value (minus 32) at index j (0..256) of a super-block.
__device__ __forceinline__ int q6k_value(const uint8_t* b, int j) {
    const int half = j / 128, r = j % 128, k = r / 32, l = r % 32;
    const uint8_t* ql = b + 64 * half;
    const uint8_t h = b[128 + 32 * half + l];
    int q;
    switch (k) {
        case 0: q = (ql[l] & 0x0F) | ((h & 3) << 4); break;
        case 1: q = (ql[l + 32] & 0x0F) | (((h >> 2) & 3) << 4); break;
        case 2: q = (ql[l] >> 4) | (((h >> 4) & 3) << 4); break;
        default: q = (ql[l + 32] >> 4) | (((h >> 6) & 3) << 4); break;
    }
    return q - 32;
}

// Element i of a stored row (src/quant.rs dequantize_row, element by element).
__device__ float dequant_at(int type, const uint8_t* row, int i) {
    switch (type) {
        case T_F32: return ((const float*)row)[i];
        case T_F16: return h2f(ld16(row + 2 * i));
        case T_BF16: return bf2f(ld16(row + 2 * i));
        case T_Q8_0: {
            const uint8_t* b = row + (i / QK) * 34;
            return h2f(ld16(b)) * (float)(int8_t)b[2 + i % QK];
        }
        case T_Q4_0: {
            const uint8_t* b = row + (i / QK) * 18;
            const int j = i % QK;
            const int q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
            return h2f(ld16(b)) * ((float)q - 8.0f);
        }
        case T_Q4_1: {
            const uint8_t* b = row + (i / QK) * 20;
            const int j = i % QK;
            const int q = j < 16 ? (b[4 + j] & 0x0F) : (b[4 + j - 16] >> 4);
            return h2f(ld16(b)) * (float)q + h2f(ld16(b + 2));
        }
        case T_Q4_K: {
            const uint8_t* b = row + (i / QK_K) * 144;
            const int j = i % QK_K, chunk = j / 64, w = j % 64, l = w % 32;
            const int sub = 2 * chunk + (w >= 32 ? 1 : 0);
            int sc, mn;
            q4k_scale_min(b + 4, sub, &sc, &mn);
            const uint8_t qb = b[16 + 32 * chunk + l];
            const int q = w < 32 ? (qb & 0x0F) : (qb >> 4);
            return h2f(ld16(b)) * (float)sc * (float)q - h2f(ld16(b + 2)) * (float)mn;
        }
        case T_Q6_K: {
            const uint8_t* b = row + (i / QK_K) * 210;
            const int j = i % QK_K, half = j / 128, r = j % 128, k = r / 32, l = r % 32;
            const int8_t sc = (int8_t)b[192 + 8 * half + l / 16 + 2 * k];
            return h2f(ld16(b + 208)) * (float)sc * (float)q6k_value(b, j);
        }
        default: return __int_as_float(0x7fc00000);
    }
}

// ---------------------------------------------------------------------------------------
// embed: Residual = row `token` of the table (dequantised). One block of 256 threads.
// ---------------------------------------------------------------------------------------
struct EmbedParams {
    const uint8_t* table;
    const uint32_t* prompt;  // [n_ctx] prompt token ids of the request
    DecodeState* state;
    float* out;              // [cols]
    int type;
    int cols;
    int row_bytes;
    int n_vocab;
};

extern "C" __global__ void __launch_bounds__(256) embed(EmbedParams p) {
    const uint32_t pos = p.state->pos;
    uint32_t token = pos < p.state->prompt_len ? p.prompt[pos] : p.state->token;
    if (token >= (uint32_t)p.n_vocab) {
        if (threadIdx.x == 0 && p.state->bad_token == 0) p.state->bad_token = token + 1;
        token = 0;
    }
    const uint8_t* row = p.table + (size_t)token * p.row_bytes;
    for (int i = threadIdx.x; i < p.cols; i += blockDim.x) p.out[i] = dequant_at(p.type, row, i);
}

// ---------------------------------------------------------------------------------------
// prep: the input of a matrix product. v = in (or silu(in) * in2 for SwiGLU); with a weight,
// v = v / sqrt(mean(v^2) + eps) * weight (RMSNorm); writes v to `out` (f32) and, when asked,
// its 8-bit blocks (q8 per 32 values, q8k per 256). One block of 1024 threads.
// ---------------------------------------------------------------------------------------
struct PrepParams {
    const float* in;
    const float* in2;     // SwiGLU's up projection (with `swiglu`)
    const float* weight;  // RMSNorm weight, or null
    float* out;           // may equal `in`
    BlockQ8* q8;          // or null
    BlockQ8K* q8k;        // or null
    int n;
    float eps;
    int swiglu;
    int pad;
};

// Values of a row staged in shared memory for the RMSNorm's one-thread f64 sum (a wider
// row sums from global memory).
#define PREP_STAGE 8192

extern "C" __global__ void __launch_bounds__(PREP_THREADS) prep(PrepParams p) {
    __shared__ float s_x[PREP_STAGE];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const bool staged = p.n <= PREP_STAGE;
    for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
        float v = p.in[i];
        if (p.swiglu) v = silu_mul(v, p.in2[i]);
        p.out[i] = v;
        if (staged) s_x[i] = v;
    }
    if (p.weight) {
        __syncthreads();
        const float scale = rms_scale_block(staged ? s_x : p.out, p.n, p.eps);
        for (int i = threadIdx.x; i < p.n; i += blockDim.x)
            p.out[i] = __fmul_rn(__fmul_rn(p.out[i], scale), p.weight[i]);
    }
    __syncthreads();
    if (p.q8) {
        for (int b = warp; b < p.n / QK; b += nwarps) {
            const float v = p.out[b * QK + lane];
            const float amax = warp_max(fabsf(v));
            const float d = __fdiv_rn(amax, 127.0f);
            const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
            const int r = __float2int_rn(__fmul_rn(v, id));
            p.q8[b].qs[lane] = (int8_t)r;
            const int sum = warp_sum_i(r);
            if (lane == 0) {
                p.q8[b].d = round_f16(d);
                p.q8[b].s = round_f16(__fmul_rn(d, (float)sum));
            }
        }
    }
    if (p.q8k) {
        for (int b = warp; b < p.n / QK_K; b += nwarps) {
            const float* x = p.out + b * QK_K;
            // The value of largest magnitude, the first one on a tie (quantize_block_q8k).
            float amax = 0.0f, mx = 0.0f;
            int at = 0x7fffffff;
            for (int k = 0; k < 8; ++k) {
                const int i = lane * 8 + k;
                const float a = fabsf(x[i]);
                if (a > amax) { amax = a; mx = x[i]; at = i; }
            }
            for (int o = 16; o > 0; o >>= 1) {
                const float a2 = __shfl_xor_sync(0xffffffffu, amax, o);
                const float m2 = __shfl_xor_sync(0xffffffffu, mx, o);
                const int at2 = __shfl_xor_sync(0xffffffffu, at, o);
                if (a2 > amax || (a2 == amax && at2 < at)) { amax = a2; mx = m2; at = at2; }
            }
            BlockQ8K* out = p.q8k + b;
            if (amax == 0.0f) {
                for (int k = 0; k < 8; ++k) out->qs[lane * 8 + k] = 0;
                if (lane < 16) out->bsums[lane] = 0;
                if (lane == 0) out->d = 0.0f;
                continue;
            }
            const float iscale = __fdiv_rn(-127.0f, mx);
            int part = 0;
            for (int k = 0; k < 8; ++k) {
                const int i = lane * 8 + k;
                int q = __float2int_rn(__fmul_rn(iscale, x[i]));
                q = q < 127 ? q : 127;
                out->qs[i] = (int8_t)q;
                part += q;
            }
            const int other = __shfl_down_sync(0xffffffffu, part, 1);
            if (lane % 2 == 0) out->bsums[lane / 2] = (int16_t)(part + other);
            if (lane == 0) out->d = __fdiv_rn(1.0f, iscale);
        }
    }
}

// ---------------------------------------------------------------------------------------
// matvec: up to three projections of one input, one warp per output row, the rows of all
// projections numbered one after the other. out[r] (+)= W[r] . x + bias[r].
// ---------------------------------------------------------------------------------------
struct Proj {
    const uint8_t* w;
    const float* bias;   // or null
    float* out;
    int type;
    int rows;
    int row_bytes;
    int accumulate;
};

struct MatVecParams {
    const float* x;        // f32 input (float weights)
    const BlockQ8* q8;     // Q8_0 / Q4_0 / Q4_1 weights
    const BlockQ8K* q8k;   // Q4_K / Q6_K weights
    Proj p[3];
    int nproj;
    int cols;
    int rows_total;
    int pad;
};

// One weight row against NT activation rows in the CPU engine's **lane form**
// (src/kernels/scalar.rs `Q8_0K`, `Q4_0K`, `Q4_1K`, `Q4KK`, `Q6KK`, `F32K` / `F16K` /
// `Bf16K`): the calling thread is lane l = lane & 7 of an 8-lane group; lane l takes, block
// after block in order, the exact integer sum of elements 4l .. 4l + 4 of the block (one
// `__dp4a`) and one fused multiply-add by the product of the scales (float weights: columns
// c = l mod 8 of each whole 8-column chunk); then the fixed 8-lane tree (`hsum8_group`) and
// the type's correction (Q4_1 + sum of m * s; Q4_K - sum of the minimums; Q6_K - the offset
// of 32; float weights + the columns past the last whole 8, one by one). out[j] (every lane
// of the group) is token j's dot product; activation row j is at x + j * xs (f32), q8 + j *
// q8s, q8k + j * q8ks; tokens j >= cnt repeat row cnt - 1 (not to be stored). All 32 lanes of
// the warp call it (the tree uses shuffles).
template <int NT>
__device__ __noinline__ void row_dot8(int type, const uint8_t* w, int cols, const float* x,
                                         size_t xs, const BlockQ8* q8, size_t q8s,
                                         const BlockQ8K* q8k, size_t q8ks, int l, int cnt,
                                         float out[NT]) {
    float acc[NT], ext[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j] = ext[j] = 0.0f;
    const bool is_float = type == T_F32 || type == T_F16 || type == T_BF16;
    const int full = cols / 8 * 8;
    switch (type) {
        case T_Q8_0:
        case T_Q4_0:
        case T_Q4_1: {
            const int bb = type == T_Q8_0 ? 34 : (type == T_Q4_0 ? 18 : 20);
            const int nb = cols / QK;
            // CH blocks at a time: first every load of the CH blocks (independent, all in
            // flight at once), then their multiply-adds in block order.
            constexpr int CH = NT == 1 ? 8 : 2;
            for (int b0 = 0; b0 < nb; b0 += CH) {
                uint16_t d16[CH], m16[CH];
                uint32_t v32[CH];
                int aq[CH][NT];
                float ad[CH][NT], as[CH][NT];
#pragma unroll
                for (int c = 0; c < CH; ++c) {
                    const int b = b0 + c < nb ? b0 + c : nb - 1;
                    const uint8_t* blk = w + (size_t)b * bb;
                    d16[c] = *(const uint16_t*)blk;
                    m16[c] = type == T_Q4_1 ? *(const uint16_t*)(blk + 2) : 0;
                    if (type == T_Q4_1) {
                        v32[c] = *(const uint32_t*)(blk + 4 + 4 * (l & 3));
                    } else {
                        const uint16_t* q =
                            (const uint16_t*)(blk + 2 + 4 * (type == T_Q8_0 ? l : (l & 3)));
                        v32[c] = (uint32_t)q[0] | ((uint32_t)q[1] << 16);
                    }
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        const BlockQ8& a = q8[(j < cnt ? j : cnt - 1) * q8s + b];
                        aq[c][j] = *(const int*)(a.qs + 4 * l);
                        ad[c][j] = a.d;
                        as[c][j] = a.s;
                    }
                }
#pragma unroll
                for (int c = 0; c < CH; ++c) {
                    if (b0 + c >= nb) break;
                    int wq;
                    if (type == T_Q8_0) {
                        wq = (int)v32[c];
                    } else {
                        uint32_t q = (l < 4 ? v32[c] : v32[c] >> 4) & 0x0F0F0F0Fu;
                        if (type == T_Q4_0) q = __vsub4(q, 0x08080808u);
                        wq = (int)q;
                    }
                    const float dw = h2f(d16[c]), mw = h2f(m16[c]);
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        const int si = __dp4a(wq, aq[c][j], 0);
                        acc[j] = __fmaf_rn(__fmul_rn(dw, ad[c][j]), (float)si, acc[j]);
                        if (type == T_Q4_1) ext[j] = __fmaf_rn(mw, as[c][j], ext[j]);
                    }
                }
            }
            break;
        }
        case T_Q4_K:
#pragma unroll 2
            for (int b = 0; b < cols / QK_K; ++b) {
                const uint8_t* blk = w + (size_t)b * 144;
                const float d = h2f(ld16(blk)), dmin = h2f(ld16(blk + 2));
                int sc[8], mn[8];
#pragma unroll
                for (int k = 0; k < 8; ++k) q4k_scale_min(blk + 4, k, &sc[k], &mn[k]);
                int wlo[4], whi[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const uint32_t v = (uint32_t)ld32_2(blk + 16 + 32 * k + 4 * l);
                    wlo[k] = (int)(v & 0x0F0F0F0Fu);
                    whi[k] = (int)((v >> 4) & 0x0F0F0F0Fu);
                }
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const BlockQ8K& a = q8k[(j < cnt ? j : cnt - 1) * q8ks + b];
                    int sumi = 0, summ = 0;
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const int lo = __dp4a(wlo[k], *(const int*)(a.qs + 64 * k + 4 * l), 0);
                        const int hi = __dp4a(whi[k], *(const int*)(a.qs + 64 * k + 32 + 4 * l), 0);
                        sumi += lo * sc[2 * k] + hi * sc[2 * k + 1];
                    }
#pragma unroll
                    for (int k = 0; k < 8; ++k)
                        summ += mn[k] * ((int)a.bsums[2 * k] + (int)a.bsums[2 * k + 1]);
                    acc[j] = __fmaf_rn(__fmul_rn(a.d, d), (float)sumi, acc[j]);
                    ext[j] = __fadd_rn(ext[j], __fmul_rn(__fmul_rn(a.d, dmin), (float)summ));
                }
            }
            break;
        case T_Q6_K:
#pragma unroll 2
            for (int b = 0; b < cols / QK_K; ++b) {
                const uint8_t* blk = w + (size_t)b * 210;
                const float d = h2f(ld16(blk + 208));
                int wq[8];
#pragma unroll
                for (int g = 0; g < 8; ++g) {
                    const int h = g / 4, k = g % 4;
                    const uint32_t lo4 =
                        ((uint32_t)ld32_2(blk + 64 * h + (k & 1) * 32 + 4 * l) >> (k >= 2 ? 4 : 0)) &
                        0x0F0F0F0Fu;
                    const uint32_t hi2 =
                        (((uint32_t)ld32_2(blk + 128 + 32 * h + 4 * l) >> (2 * k)) & 0x03030303u) << 4;
                    wq[g] = (int)(lo4 | hi2);
                }
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const BlockQ8K& a = q8k[(j < cnt ? j : cnt - 1) * q8ks + b];
                    int sumi = 0, off = 0;
#pragma unroll
                    for (int g = 0; g < 8; ++g)
                        sumi += __dp4a(wq[g], *(const int*)(a.qs + 32 * g + 4 * l), 0) *
                                (int)(int8_t)blk[192 + 2 * g + (l >> 2)];
#pragma unroll
                    for (int k = 0; k < 16; ++k) off += (int)(int8_t)blk[192 + k] * (int)a.bsums[k];
                    const float dd = __fmul_rn(a.d, d);
                    acc[j] = __fmaf_rn(dd, (float)sumi, acc[j]);
                    ext[j] = __fadd_rn(ext[j], __fmul_rn(dd, (float)(32 * off)));
                }
            }
            break;
        case T_F32:
        case T_F16:
        case T_BF16:
            for (int c0 = 0; c0 < full; c0 += 64) {
                // 8 chunks' loads first, then their multiply-adds in column order.
                float wv[8], xv[8][NT];
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    const int i = min(c0 + 8 * k, full - 8) + l;
                    wv[k] = type == T_F32   ? ((const float*)w)[i]
                            : type == T_F16 ? h2f(*(const uint16_t*)(w + 2 * i))
                                            : bf2f(*(const uint16_t*)(w + 2 * i));
#pragma unroll
                    for (int j = 0; j < NT; ++j) xv[k][j] = x[(j < cnt ? j : cnt - 1) * xs + i];
                }
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    if (c0 + 8 * k >= full) break;
#pragma unroll
                    for (int j = 0; j < NT; ++j) acc[j] = __fmaf_rn(wv[k], xv[k][j], acc[j]);
                }
            }
            break;
        default:
#pragma unroll
            for (int j = 0; j < NT; ++j) acc[j] = __int_as_float(0x7fc00000);
            break;
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        float h = hsum8_group(acc[j]);
        if (type == T_Q4_1) h = __fadd_rn(h, ext[j]);
        else if (type == T_Q4_K || type == T_Q6_K) h = __fsub_rn(h, ext[j]);
        else if (is_float) {
            for (int i = full; i < cols; ++i) {
                const float wv = type == T_F32   ? ((const float*)w)[i]
                                 : type == T_F16 ? h2f(ld16(w + 2 * i))
                                                 : bf2f(ld16(w + 2 * i));
                h = __fadd_rn(h, __fmul_rn(wv, x[(j < cnt ? j : cnt - 1) * xs + i]));
            }
        }
        out[j] = h;
    }
}

// ---------------------------------------------------------------------------------------
// The lane form with the whole warp (decode step, one activation row): R rows of one weight
// type against x. A row is cut into units (a 32-block of Q8_0 / Q4_0 / Q4_1, a 256-block of
// Q4_K / Q6_K, an 8-column chunk of F32 / F16 / BF16); lane l of `row_dot8` adds, unit after
// unit in order, acc = fma(a_u, b_u, acc) and ext = fma(c_u, d_u, ext) (Q4_K / Q6_K: c_u the
// minimums' term, d_u = 1, i.e. ext + c_u; fma(c, 1, e) is the rounded c + e). The terms of a
// unit depend on nothing else, so the warp's four 8-lane groups compute them for units g,
// g + 4, g + 8, ... (all their loads in flight at once), and every group then walks all units
// in order, taking each unit's terms from the lane l of the group that made them (shuffles):
// the same chains as `row_dot8`'s, with four times the loads in flight and one row per warp
// instead of four. out[r] (every lane) is row r's dot product. All 32 lanes call it.
// ---------------------------------------------------------------------------------------
template <int TYPE>
__device__ __forceinline__ int units_of(int cols) {
    return TYPE == T_Q4_K || TYPE == T_Q6_K ? cols / QK_K
           : (TYPE == T_F32 || TYPE == T_F16 || TYPE == T_BF16) ? cols / 8
                                                                  : cols / QK;
}

// The raw words of 32-block u of a Q8_0 / Q4_0 / Q4_1 row for lane l: dm the f16 scale (and
// Q4_1's f16 minimum above it), v the 4 bytes of quants lane l reads.
template <int TYPE>
__device__ __forceinline__ void q32_raw(const uint8_t* w, int u, int l, uint32_t* dm, uint32_t* v) {
    const int bb = TYPE == T_Q8_0 ? 34 : (TYPE == T_Q4_0 ? 18 : 20);
    const uint8_t* blk = w + (size_t)u * bb;
    if (TYPE == T_Q4_1) {
        *dm = *(const uint32_t*)blk;  // blocks of 20 bytes stay 4-aligned
        *v = *(const uint32_t*)(blk + 4 + 4 * (l & 3));
    } else {
        *dm = *(const uint16_t*)blk;
        const uint16_t* q = (const uint16_t*)(blk + 2 + 4 * (TYPE == T_Q8_0 ? l : (l & 3)));
        *v = (uint32_t)q[0] | ((uint32_t)q[1] << 16);
    }
}

// Block u's terms for lane l from its raw words (`row_dot8`'s per-block arithmetic).
template <int TYPE>
__device__ __forceinline__ void q32_terms(uint32_t dm, uint32_t v, int u, int l, const BlockQ8* q8,
                                          float* a, float* b, float* c, float* d) {
    int wq;
    if (TYPE == T_Q8_0) wq = (int)v;
    else if (TYPE == T_Q4_1) wq = (int)((l < 4 ? v : v >> 4) & 0x0F0F0F0Fu);
    else wq = (int)__vsub4((l < 4 ? v : v >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    const BlockQ8& xa = q8[u];
    *a = __fmul_rn(h2f((uint16_t)(dm & 0xFFFFu)), xa.d);
    *b = (float)__dp4a(wq, *(const int*)(xa.qs + 4 * l), 0);
    *c = TYPE == T_Q4_1 ? h2f((uint16_t)(dm >> 16)) : 0.0f;
    *d = xa.s;
}

// Unit u's terms for lane l (`row_dot8`'s per-block arithmetic, unchanged).
template <int TYPE>
__device__ __forceinline__ void unit_terms(const uint8_t* w, int u, int l, const float* x,
                                           const BlockQ8* q8, const BlockQ8K* q8k, float* a,
                                           float* b, float* c, float* d) {
    if (TYPE == T_Q8_0 || TYPE == T_Q4_0 || TYPE == T_Q4_1) {
        uint32_t dm, v;
        q32_raw<TYPE>(w, u, l, &dm, &v);
        q32_terms<TYPE>(dm, v, u, l, q8, a, b, c, d);
    } else if (TYPE == T_Q4_K) {
        const uint8_t* blk = w + (size_t)u * 144;
        const float dd = h2f(ld16(blk)), dmin = h2f(ld16(blk + 2));
        int sc[8], mn[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) q4k_scale_min(blk + 4, k, &sc[k], &mn[k]);
        const BlockQ8K& xa = q8k[u];
        int sumi = 0, summ = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t v = (uint32_t)ld32_2(blk + 16 + 32 * k + 4 * l);
            const int lo = __dp4a((int)(v & 0x0F0F0F0Fu), *(const int*)(xa.qs + 64 * k + 4 * l), 0);
            const int hi =
                __dp4a((int)((v >> 4) & 0x0F0F0F0Fu), *(const int*)(xa.qs + 64 * k + 32 + 4 * l), 0);
            sumi += lo * sc[2 * k] + hi * sc[2 * k + 1];
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) summ += mn[k] * ((int)xa.bsums[2 * k] + (int)xa.bsums[2 * k + 1]);
        *a = __fmul_rn(xa.d, dd);
        *b = (float)sumi;
        *c = __fmul_rn(__fmul_rn(xa.d, dmin), (float)summ);
        *d = 1.0f;
    } else if (TYPE == T_Q6_K) {
        const uint8_t* blk = w + (size_t)u * 210;
        const BlockQ8K& xa = q8k[u];
        int sumi = 0, off = 0;
#pragma unroll
        for (int g = 0; g < 8; ++g) {
            const int h = g / 4, k = g % 4;
            const uint32_t lo4 =
                ((uint32_t)ld32_2(blk + 64 * h + (k & 1) * 32 + 4 * l) >> (k >= 2 ? 4 : 0)) & 0x0F0F0F0Fu;
            const uint32_t hi2 = (((uint32_t)ld32_2(blk + 128 + 32 * h + 4 * l) >> (2 * k)) & 0x03030303u) << 4;
            sumi += __dp4a((int)(lo4 | hi2), *(const int*)(xa.qs + 32 * g + 4 * l), 0) *
                    (int)(int8_t)blk[192 + 2 * g + (l >> 2)];
        }
#pragma unroll
        for (int k = 0; k < 16; ++k) off += (int)(int8_t)blk[192 + k] * (int)xa.bsums[k];
        const float dd = __fmul_rn(xa.d, h2f(ld16(blk + 208)));
        *a = dd;
        *b = (float)sumi;
        *c = __fmul_rn(dd, (float)(32 * off));
        *d = 1.0f;
    } else {
        const int i = 8 * u + l;
        *a = TYPE == T_F32 ? ((const float*)w)[i]
             : TYPE == T_F16 ? h2f(*(const uint16_t*)(w + 2 * i))
                             : bf2f(*(const uint16_t*)(w + 2 * i));
        *b = x[i];
        *c = 0.0f;
        *d = 0.0f;
    }
}

template <int TYPE, int R>
__device__ __noinline__ void row_dot_warp_t(const uint8_t* const* w, int cols, const float* x,
                                            const BlockQ8* q8, const BlockQ8K* q8k, float* out) {
    const int lane = threadIdx.x % 32, g = lane >> 3, l = lane & 7;
    constexpr bool EXT = TYPE == T_Q4_1 || TYPE == T_Q4_K || TYPE == T_Q6_K;
    constexpr bool FLOAT = TYPE == T_F32 || TYPE == T_F16 || TYPE == T_BF16;
    // Units per group and turn: a 576-wide Q4_1 row (18 blocks) in one turn, 1,536 in two.
    constexpr int CH = (TYPE == T_Q4_K || TYPE == T_Q6_K) ? 2 : 8;
    const int nu = units_of<TYPE>(cols);
    float acc[R], ext[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = ext[r] = 0.0f;
    for (int u0 = 0; u0 < nu; u0 += 4 * CH) {
        float ta[CH][R], tb[CH][R], tc[CH][R], td[CH][R];
#pragma unroll
        for (int k = 0; k < CH; ++k) {
            const int u = min(u0 + g + 4 * k, nu - 1);
#pragma unroll
            for (int r = 0; r < R; ++r)
                unit_terms<TYPE>(w[r], u, l, x, q8, q8k, &ta[k][r], &tb[k][r], &tc[k][r], &td[k][r]);
        }
#pragma unroll
        for (int k = 0; k < CH; ++k) {
#pragma unroll
            for (int gg = 0; gg < 4; ++gg) {
                if (u0 + gg + 4 * k >= nu) break;  // the same for the whole warp
                const int src = gg * 8 + l;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const float a = __shfl_sync(0xffffffffu, ta[k][r], src);
                    const float b = __shfl_sync(0xffffffffu, tb[k][r], src);
                    acc[r] = __fmaf_rn(a, b, acc[r]);
                    if (EXT) {
                        const float c = __shfl_sync(0xffffffffu, tc[k][r], src);
                        const float d = __shfl_sync(0xffffffffu, td[k][r], src);
                        ext[r] = __fmaf_rn(c, d, ext[r]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float h = hsum8_group(acc[r]);
        if (TYPE == T_Q4_1) h = __fadd_rn(h, ext[r]);
        else if (TYPE == T_Q4_K || TYPE == T_Q6_K) h = __fsub_rn(h, ext[r]);
        else if (FLOAT) {
            for (int i = nu * 8; i < cols; ++i) {
                const float wv = TYPE == T_F32   ? ((const float*)w[r])[i]
                                 : TYPE == T_F16 ? h2f(ld16(w[r] + 2 * i))
                                                 : bf2f(ld16(w[r] + 2 * i));
                h = __fadd_rn(h, __fmul_rn(wv, x[i]));
            }
        }
        out[r] = h;
    }
}

// The first turn of a fused product with its weights loaded BEFORE `dependency_wait`: a
// warp's row (or pair of rows) of Q8_0 / Q4_0 / Q4_1, the raw words of the first CH32 blocks
// of each group in registers while the previous kernel finishes and the prologue runs, then
// `row_dot_warp`'s chains (the same terms, the same order). Other types take `row_dot_warp`.
#define CH32 8
// Blocks per group in the first round of `prep_matvec_wide` (no register cap): 64 blocks of
// 32, so a 1,536-wide row (the down projection of a small model) is loaded whole before the
// wait instead of its last 16 blocks after the first round's chain.
#define CH32_WIDE 16
__device__ __forceinline__ bool is_q32(int type) {
    return type == T_Q8_0 || type == T_Q4_0 || type == T_Q4_1;
}

template <int TYPE, int R, int CH>
__device__ __forceinline__ void q32_load_round(const uint8_t* const* w, int nu, int u0,
                                               uint32_t dm[CH][R], uint32_t v[CH][R]) {
    const int lane = threadIdx.x % 32, g = lane >> 3, l = lane & 7;
#pragma unroll
    for (int k = 0; k < CH; ++k) {
        const int u = min(u0 + g + 4 * k, nu - 1);
#pragma unroll
        for (int r = 0; r < R; ++r) q32_raw<TYPE>(w[r], u, l, &dm[k][r], &v[k][r]);
    }
}

template <int TYPE, int R, int CH>
__device__ __forceinline__ void q32_chain(const uint8_t* const* w, int nu, const BlockQ8* q8,
                                          uint32_t dm[CH][R], uint32_t v[CH][R], float* out) {
    const int lane = threadIdx.x % 32, g = lane >> 3, l = lane & 7;
    float acc[R], ext[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = ext[r] = 0.0f;
    for (int u0 = 0; u0 < nu; u0 += 4 * CH) {
        if (u0 > 0) q32_load_round<TYPE, R, CH>(w, nu, u0, dm, v);
        // Round k's terms (units u0 + 4k .. u0 + 4k + 4, one per group), then their chains:
        // only one round's terms live at a time.
#pragma unroll
        for (int k = 0; k < CH; ++k) {
            if (u0 + 4 * k >= nu) break;  // the same for the whole warp
            const int u = min(u0 + g + 4 * k, nu - 1);
            float ta[R], tb[R], tc[R], td[R];
#pragma unroll
            for (int r = 0; r < R; ++r)
                q32_terms<TYPE>(dm[k][r], v[k][r], u, l, q8, &ta[r], &tb[r], &tc[r], &td[r]);
#pragma unroll
            for (int gg = 0; gg < 4; ++gg) {
                if (u0 + gg + 4 * k >= nu) break;
                const int src = gg * 8 + l;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    acc[r] = __fmaf_rn(__shfl_sync(0xffffffffu, ta[r], src),
                                       __shfl_sync(0xffffffffu, tb[r], src), acc[r]);
                    if (TYPE == T_Q4_1)
                        ext[r] = __fmaf_rn(__shfl_sync(0xffffffffu, tc[r], src),
                                           __shfl_sync(0xffffffffu, td[r], src), ext[r]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const float h = hsum8_group(acc[r]);
        out[r] = TYPE == T_Q4_1 ? __fadd_rn(h, ext[r]) : h;
    }
}

// The first round's raw words of rows w[0 .. R) of type `type` (nothing for other types).
template <int R, int CH>
__device__ __forceinline__ void q32_preload(int type, const uint8_t* const* w, int cols,
                                            uint32_t dm[CH][R], uint32_t v[CH][R]) {
    switch (type) {
        case T_Q8_0: q32_load_round<T_Q8_0, R, CH>(w, cols / QK, 0, dm, v); break;
        case T_Q4_0: q32_load_round<T_Q4_0, R, CH>(w, cols / QK, 0, dm, v); break;
        case T_Q4_1: q32_load_round<T_Q4_1, R, CH>(w, cols / QK, 0, dm, v); break;
        default: break;
    }
}

// `row_dot_warp` of rows whose first round `q32_preload` loaded (Q8_0 / Q4_0 / Q4_1 only).
template <int R, int CH>
__device__ __forceinline__ void q32_dot_preloaded(int type, const uint8_t* const* w, int cols,
                                                  const BlockQ8* q8, uint32_t dm[CH][R],
                                                  uint32_t v[CH][R], float* out) {
    switch (type) {
        case T_Q8_0: q32_chain<T_Q8_0, R, CH>(w, cols / QK, q8, dm, v, out); break;
        case T_Q4_0: q32_chain<T_Q4_0, R, CH>(w, cols / QK, q8, dm, v, out); break;
        default: q32_chain<T_Q4_1, R, CH>(w, cols / QK, q8, dm, v, out); break;
    }
}

// `row_dot_warp_t` for the weight type `type` (the same for the R rows).
template <int R>
__device__ __forceinline__ void row_dot_warp(int type, const uint8_t* const* w, int cols,
                                             const float* x, const BlockQ8* q8,
                                             const BlockQ8K* q8k, float* out) {
    switch (type) {
        case T_Q8_0: row_dot_warp_t<T_Q8_0, R>(w, cols, x, q8, q8k, out); break;
        case T_Q4_0: row_dot_warp_t<T_Q4_0, R>(w, cols, x, q8, q8k, out); break;
        case T_Q4_1: row_dot_warp_t<T_Q4_1, R>(w, cols, x, q8, q8k, out); break;
        case T_Q4_K: row_dot_warp_t<T_Q4_K, R>(w, cols, x, q8, q8k, out); break;
        case T_Q6_K: row_dot_warp_t<T_Q6_K, R>(w, cols, x, q8, q8k, out); break;
        case T_F32: row_dot_warp_t<T_F32, R>(w, cols, x, q8, q8k, out); break;
        case T_F16: row_dot_warp_t<T_F16, R>(w, cols, x, q8, q8k, out); break;
        case T_BF16: row_dot_warp_t<T_BF16, R>(w, cols, x, q8, q8k, out); break;
        default:
#pragma unroll
            for (int r = 0; r < R; ++r) out[r] = __int_as_float(0x7fc00000);
            break;
    }
}

// `row_dot8` of one row of a projection against the step's one activation row.
__device__ __forceinline__ float row_dot(const MatVecParams& p, const Proj& pr, const uint8_t* w,
                                         int l) {
    float o[1];
    row_dot8<1>(pr.type, w, p.cols, p.x, 0, p.q8, 0, p.q8k, 0, l, 1, o);
    return o[0];
}

// The projection of row r0 of the concatenated projections (clamped to the last row when r0
// is past them: the caller stores nothing then); r becomes the row within it.
__device__ __forceinline__ int proj_of(const Proj* ps, int nproj, int rows_total, int r0, int* r) {
    int k = 0, rr = r0 < rows_total ? r0 : rows_total - 1;
    while (k + 1 < nproj && rr >= ps[k].rows) {
        rr -= ps[k].rows;
        ++k;
    }
    *r = rr;
    return k;
}

// One 8-lane group per output row, 4 rows per warp, MV_ROWS rows per block.
#define MV_ROWS (MV_WARPS * 4)
extern "C" __global__ void __launch_bounds__(MV_WARPS * 32) matvec(MatVecParams p) {
    const int l = threadIdx.x & 7;
    if (blockIdx.x * MV_ROWS + (threadIdx.x / 32) * 4 >= p.rows_total) return;  // whole warps
    const int r0 = blockIdx.x * MV_ROWS + threadIdx.x / 8;
    int r;
    const int k = proj_of(p.p, p.nproj, p.rows_total, r0, &r);
    const Proj& pr = p.p[k];
    const float dot = row_dot(p, pr, pr.w + (size_t)r * pr.row_bytes, l);
    if (r0 < p.rows_total && l == 0) {
        float v = dot;
        if (pr.bias) v = __fadd_rn(v, pr.bias[r]);
        pr.out[r] = pr.accumulate ? __fadd_rn(pr.out[r], v) : v;
    }
}

// ---------------------------------------------------------------------------------------
// head_norm: RMSNorm of each head's lanes times `weight` (Qwen3 q/k norm). One warp per head.
// ---------------------------------------------------------------------------------------
struct HeadNormParams {
    float* x;
    const float* weight;  // [head_dim]
    int heads;
    int head_dim;
    float eps;
    int pad;
};

extern "C" __global__ void __launch_bounds__(128) head_norm(HeadNormParams p) {
    const int lane = threadIdx.x % 32;
    const int h = blockIdx.x * 4 + threadIdx.x / 32;
    if (h >= p.heads) return;
    float* x = p.x + h * p.head_dim;
    const float scale = rms_scale_warp(x, p.head_dim, p.eps);
    for (int i = lane; i < p.head_dim; i += 32) x[i] = __fmul_rn(__fmul_rn(x[i], scale), p.weight[i]);
}

// RoPE of one pair (a, b) = lanes (i, i + head_dim / 2) of a head with cos c and sin s:
// forward.rs `rope` (fused: kernels `rope_fused`, llama.cpp's `fma(a, c, -(b s))`,
// `fma(a, s, b c)`; else transformers' separate products). The angles come from the table the
// host computed at load with the CPU engine's own code (forward.rs `rope_angles`).
__device__ __forceinline__ void rope_pair(float a, float b, float c, float s, int fused,
                                          float* na, float* nb) {
    if (fused) {
        *na = __fmaf_rn(a, c, -__fmul_rn(b, s));
        *nb = __fmaf_rn(a, s, __fmul_rn(b, c));
    } else {
        *na = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        *nb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
}

// Where lane i of a head (Hugging Face order) sits in the attention's lane order
// (forward.rs `to_lane_order`): interleaved pairs (i -> 2i, i + half -> 2i + 1) or unchanged.
__device__ __forceinline__ int lane_slot(int i, int half, int interleaved) {
    return interleaved ? (i < half ? 2 * i : 2 * (i - half) + 1) : i;
}

// `form` of the RoPE parameters: bit 0 the fused rotation, bit 1 interleaved lanes.
#define ROPE_FUSED 1
#define ROPE_INTERLEAVED 2

// ---------------------------------------------------------------------------------------
// rope: rotate-half RoPE of each head of `x` at the state's position; with a cache, the
// rotated keys and the values (f16) are written at that position (RoPE fused with the cache
// write). One thread per rotated pair.
// ---------------------------------------------------------------------------------------
struct RopeParams {
    float* x;
    const float* angles;     // [n_ctx, head_dim]: per position [cos; half] ++ [sin; half]
    const DecodeState* state;
    uint16_t* kcache;        // [n_ctx, kv_dim] f16 of this layer, or null
    uint16_t* vcache;
    const float* v;          // [kv_dim]
    int heads;
    int head_dim;
    int kv_dim;
    int form;                // ROPE_FUSED | ROPE_INTERLEAVED
};

extern "C" __global__ void __launch_bounds__(128) rope(RopeParams p) {
    const int half = p.head_dim / 2;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= p.heads * half) return;
    const int h = t / half, i = t % half;
    const uint32_t pos = p.state->pos;
    float* x = p.x + h * p.head_dim;
    const float* ang = p.angles + (size_t)pos * p.head_dim;
    float na, nb;
    rope_pair(x[i], x[i + half], ang[i], ang[half + i], p.form & ROPE_FUSED, &na, &nb);
    x[i] = na;
    x[i + half] = nb;
    if (p.kcache) {
        const int il = p.form & ROPE_INTERLEAVED;
        const size_t at = (size_t)pos * p.kv_dim + h * p.head_dim;
        p.kcache[at + lane_slot(i, half, il)] = f2h(na);
        p.kcache[at + lane_slot(i + half, half, il)] = f2h(nb);
        p.vcache[at + i] = f2h(p.v[h * p.head_dim + i]);
        p.vcache[at + i + half] = f2h(p.v[h * p.head_dim + i + half]);
    }
}

// ---------------------------------------------------------------------------------------
// attention: causal grouped-query attention of one query row, as the CPU engine computes
// it (forward.rs `Frame::attention`, llama.cpp's non-flash path): the query in the lane
// order rounded to f16, every score q . k (f16 key cache) times 1 / sqrt(head_dim), their
// maximum, the numerators exp(s - max) (`ggml_exp`) summed per 8 in f32 and the 8-sums in
// f64 in position order (kernels `softmax_exp`), the probabilities times (float)(1 / sum)
// rounded to f16, then their weighted sum of the f16 value rows. The dot products and the
// weighted sum follow kernels `F16Order`: Gemv (32 slots, `reduce_gemv`) for a forward
// chunk of one token, Gemm (8 lanes, `hsum8`) for a longer one. One block of ATT_THREADS per
// (query head, row): the scores of up to ATT_TILE positions stay in shared memory (longer
// spans recompute them in each of the three passes).
// ---------------------------------------------------------------------------------------
#define ATT_THREADS (ATTN_WARPS * 32)
#define ATT_TILE 8192

struct AttnShared {
    float buf[ATT_TILE];       // scores, then numerators, then probabilities; at the end the sums
    float cs[ATT_TILE / 8];    // the 8-sums of a tile
    float q[MAX_HEAD_DIM];     // the query, lane order, f16 values
    float red[ATT_THREADS / 32];
    double red64[ATT_THREADS / 32];
    float mx, inv;
};

// scalar.rs `hsum8` of 8 values in registers.
__device__ __forceinline__ float hsum8_arr(const float a[8]) {
    const float t0 = __fadd_rn(a[0], a[4]), t1 = __fadd_rn(a[1], a[5]);
    const float t2 = __fadd_rn(a[2], a[6]), t3 = __fadd_rn(a[3], a[7]);
    return __fadd_rn(__fadd_rn(t0, t2), __fadd_rn(t1, t3));
}

// scalar.rs `reduce_gemv` of 32 slots in registers.
__device__ __forceinline__ float reduce_gemv_arr(const float s[32]) {
    float r[8];
#pragma unroll
    for (int l = 0; l < 8; ++l) r[l] = __fadd_rn(__fadd_rn(s[l], s[16 + l]), __fadd_rn(s[8 + l], s[24 + l]));
    const float t0 = __fadd_rn(r[0], r[4]), t1 = __fadd_rn(r[1], r[5]);
    const float t2 = __fadd_rn(r[2], r[6]), t3 = __fadd_rn(r[3], r[7]);
    return __fadd_rn(__fadd_rn(t0, t1), __fadd_rn(t2, t3));
}

// Eight f16 values at p as f32 (one 16-byte load when `vec`).
__device__ __forceinline__ void load8_f16(const uint16_t* p, bool vec, float v[8]) {
    if (vec) {
        const uint4 u = *(const uint4*)p;
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            v[2 * k] = h2f((uint16_t)(w[k] & 0xFFFFu));
            v[2 * k + 1] = h2f((uint16_t)(w[k] >> 16));
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = h2f(p[k]);
    }
}

// q . k, q in shared memory (lane order, f16 values), k one key row: scalar.rs
// `dot_f16_gemm` (gemm; head_dim % 8 == 0) or `dot_f16_gemv` (the columns past the last
// whole 32 added in f64).
__device__ __forceinline__ float score_dot(const float* q, const uint16_t* k, int hd, bool gemm,
                                           bool vec) {
    if (gemm) {
        float a[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        for (int c = 0; c < hd; c += 8) {
            float kv[8];
            load8_f16(k + c, vec, kv);
#pragma unroll
            for (int l = 0; l < 8; ++l) a[l] = __fmaf_rn(kv[l], q[c + l], a[l]);
        }
        return hsum8_arr(a);
    }
    const int whole = hd / 32 * 32;
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    for (int c = 0; c < whole; c += 32) {
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            float kv[8];
            load8_f16(k + c + 8 * g, vec, kv);
#pragma unroll
            for (int l = 0; l < 8; ++l) s[8 * g + l] = __fmaf_rn(q[c + 8 * g + l], kv[l], s[8 * g + l]);
        }
    }
    const float r = reduce_gemv_arr(s);
    if (whole == hd) return r;
    double sum = (double)r;
    for (int c = whole; c < hd; ++c) sum = __dadd_rn(sum, (double)__fmul_rn(q[c], h2f(k[c])));
    return __double2float_rn(sum);
}

// `score_dot`'s Gemv order (head_dim HD, a multiple of 32) for R key rows at once: every
// 16-byte load of the R rows issued before the first fma, then each row's 32 slots and
// `reduce_gemv_arr` exactly as `score_dot` adds them, so the same value per row. A row's
// loads wait for memory once instead of once per 32 columns (HD = 64: two rows, 16 loads in
// flight a thread; HD = 128: one row, 16 loads).
template <int HD, int R>
__device__ __forceinline__ void score_gemv_rows(const float* q, const uint16_t* const (&k)[R],
                                                float (&out)[R]) {
    uint4 raw[R][HD / 8];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < HD / 8; ++c) raw[r][c] = *(const uint4*)(k[r] + 8 * c);
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float s[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < HD; c += 32) {
#pragma unroll
            for (int g = 0; g < 4; ++g) {
                const uint4 u = raw[r][(c + 8 * g) / 8];
                const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int l = 0; l < 8; ++l) {
                    const float kv = h2f((uint16_t)(l % 2 ? w[l / 2] >> 16 : w[l / 2] & 0xFFFFu));
                    s[8 * g + l] = __fmaf_rn(q[c + 8 * g + l], kv, s[8 * g + l]);
                }
            }
        }
        out[r] = reduce_gemv_arr(s);
    }
}

// The scores of the key rows j = j0, j0 + stride, ... below n (row j at kb + (base + j) *
// kv_dim), each `score_dot(...) * scale` into e[j]; returns their maximum. The one-token
// (Gemv) order at head_dim 64 or 128 goes through `score_gemv_rows`, every other case
// through `score_dot` row by row: the same values either way. `attention_cluster`'s scores
// (decode on SM 9.0+: 3-4 % more tok/s at position 2,048, across calls; SmolLM2-135M Q4_1,
// H100, session 43). `attend` keeps `score_dot` row by row: in the `layer` kernel the batched
// loads (these and sixteen-row turns of the weighted sums) cost 1.6-5.4 % at positions
// 128-1,536 (docs/evidence/llm-gpu.md, session 43).
//
// Rows i < nk are read from `ks` instead (row i at ks + i * hd, a copy of the same values in
// shared memory: `attention_cluster`'s staged rows); nk = 0: every row from the cache.
__device__ __forceinline__ float score_rows(const float* q, const uint16_t* kb, size_t base,
                                            int kv_dim, int hd, bool gdot, int j0, int n,
                                            int stride, float scale, float* e,
                                            const uint16_t* ks = nullptr, int nk = 0) {
    float mx = NEG_INF;
    int j = j0;
    const auto row = [&](int i) {
        return i < nk ? ks + (size_t)i * hd : kb + (base + (size_t)i) * kv_dim;
    };
    if (!gdot && hd == 64) {
        for (; j + stride < n; j += 2 * stride) {
            const uint16_t* k[2] = {row(j), row(j + stride)};
            float sc[2];
            score_gemv_rows<64, 2>(q, k, sc);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float v = __fmul_rn(sc[r], scale);
                e[j + r * stride] = v;
                mx = fmaxf(mx, v);
            }
        }
        for (; j < n; j += stride) {
            const uint16_t* k[1] = {row(j)};
            float sc[1];
            score_gemv_rows<64, 1>(q, k, sc);
            const float v = __fmul_rn(sc[0], scale);
            e[j] = v;
            mx = fmaxf(mx, v);
        }
    } else if (!gdot && hd == 128) {
        for (; j < n; j += stride) {
            const uint16_t* k[1] = {row(j)};
            float sc[1];
            score_gemv_rows<128, 1>(q, k, sc);
            const float v = __fmul_rn(sc[0], scale);
            e[j] = v;
            mx = fmaxf(mx, v);
        }
    }
    for (; j < n; j += stride) {
        const float v = __fmul_rn(score_dot(q, row(j), hd, gdot, true), scale);
        e[j] = v;
        mx = fmaxf(mx, v);
    }
    return mx;
}

// The weighted sum's chains of one tile (positions t0 .. t0 + n, t0 a multiple of `lanes`):
// unit u = (slot sl, dims dg * VW ..) of this thread accumulates the rows j = sl (mod lanes)
// in order, fma(v, p, acc) (scalar.rs `weighted_sum_gemv` / `_gemm`).
template <int VW, int MAXU>
__device__ __forceinline__ void weighted_tile(const float* pr, const uint16_t* vb, int kv_dim,
                                              int hd, int t0, int n, int lanes,
                                              float acc[MAXU][VW]) {
    const int groups = hd / VW, units = lanes * groups;
#pragma unroll
    for (int u = 0; u < MAXU; ++u) {
        const int ui = threadIdx.x + u * ATT_THREADS;
        if (ui < units) {
            const int sl = ui / groups, d0 = (ui % groups) * VW;
            int j = sl;
            for (; j + 7 * lanes < n; j += 8 * lanes) {
                float v[8][VW];
#pragma unroll
                for (int r = 0; r < 8; ++r) {
                    const uint16_t* row = vb + (size_t)(t0 + j + r * lanes) * kv_dim + d0;
                    if (VW == 8) load8_f16(row, true, v[r]);
                    else v[r][0] = h2f(row[0]);
                }
#pragma unroll
                for (int r = 0; r < 8; ++r) {
                    const float pj = pr[j + r * lanes];
#pragma unroll
                    for (int e = 0; e < VW; ++e) acc[u][e] = __fmaf_rn(v[r][e], pj, acc[u][e]);
                }
            }
            for (; j < n; j += lanes) {
                float v[VW];
                const uint16_t* row = vb + (size_t)(t0 + j) * kv_dim + d0;
                if (VW == 8) load8_f16(row, true, v);
                else v[0] = h2f(row[0]);
                const float pj = pr[j];
#pragma unroll
                for (int e = 0; e < VW; ++e) acc[u][e] = __fmaf_rn(v[e], pj, acc[u][e]);
            }
        }
    }
}

// Pass 3 and the final sums (see `attend`).
template <int VW, int MAXU>
__device__ void attend_weighted(AttnShared& sm, const uint16_t* kb, const uint16_t* vb,
                                int kv_dim, int hd, int len, float scale, bool gdot, bool gsum,
                                bool vec, float* out) {
    const int tid = threadIdx.x;
    const int tiles = (len + ATT_TILE - 1) / ATT_TILE;
    const int lanes = gsum ? 8 : 32;
    const float mx = sm.mx, inv = sm.inv;
    float acc[MAXU][VW];
#pragma unroll
    for (int u = 0; u < MAXU; ++u)
#pragma unroll
        for (int e = 0; e < VW; ++e) acc[u][e] = 0.0f;
    for (int tt = 0; tt < tiles; ++tt) {
        const int t0 = tt * ATT_TILE, n = min(len - t0, ATT_TILE);
        for (int j = tid; j < n; j += ATT_THREADS) {
            float e = sm.buf[j];
            if (tiles > 1)
                e = ggml_exp(__fsub_rn(
                    __fmul_rn(score_dot(sm.q, kb + (size_t)(t0 + j) * kv_dim, hd, gdot, vec), scale), mx));
            sm.buf[j] = round_f16(__fmul_rn(e, inv));
        }
        __syncthreads();
        weighted_tile<VW, MAXU>(sm.buf, vb, kv_dim, hd, t0, n, lanes, acc);
        __syncthreads();
    }
    const int groups = hd / VW;
#pragma unroll
    for (int u = 0; u < MAXU; ++u) {
        const int ui = tid + u * ATT_THREADS;
        if (ui < lanes * groups) {
            const int sl = ui / groups, d0 = (ui % groups) * VW;
#pragma unroll
            for (int e = 0; e < VW; ++e) sm.buf[sl * hd + d0 + e] = acc[u][e];
        }
    }
    __syncthreads();
    for (int d = tid; d < hd; d += ATT_THREADS) {
        if (gsum) {
            float a[8];
#pragma unroll
            for (int l = 0; l < 8; ++l) a[l] = sm.buf[l * hd + d];
            out[d] = hsum8_arr(a);
        } else {
            float s[32];
#pragma unroll
            for (int l = 0; l < 32; ++l) s[l] = sm.buf[l * hd + d];
            out[d] = reduce_gemv_arr(s);
        }
    }
}

// Head attention of one query row over positions 0 .. len (see above). qh: the head's query
// (Hugging Face lane order); kb, vb: the cache rows' first element of the head's KV head;
// `gemm`: the order of a multi-token forward chunk; `interleaved`: llama.cpp's lane order.
// Every thread of the block calls it.
// `kb` / `vb` are read with plain (coherent) loads, never `__ldg` / `ld.global.nc` nor through
// `__restrict__` pointers: `layer` reads rows of the cache that other blocks of its cluster
// wrote in the same launch (ordered by a cluster barrier), which the non-coherent path may
// not see.
__device__ __noinline__ void attend(const float* qh, const uint16_t* kb, const uint16_t* vb, int kv_dim,
                       int hd, int len, float scale, bool gemm, int interleaved, float* out) {
    __shared__ AttnShared sm;
    const int tid = threadIdx.x;
    const int half = hd / 2;
    const bool gdot = gemm && hd % 8 == 0, gsum = gemm && hd % 4 == 0;
    const bool vec = true;  // head_dim % 8 == 0 (checked at load): 16-byte cache rows
    for (int i = tid; i < hd; i += ATT_THREADS) sm.q[lane_slot(i, half, interleaved)] = round_f16(qh[i]);
    __syncthreads();
    const int tiles = (len + ATT_TILE - 1) / ATT_TILE;
    // 1. The scores and their maximum (order-free).
    float mx = NEG_INF;
    for (int tt = 0; tt < tiles; ++tt) {
        const int t0 = tt * ATT_TILE, n = min(len - t0, ATT_TILE);
        for (int j = tid; j < n; j += ATT_THREADS) {
            const float sc =
                __fmul_rn(score_dot(sm.q, kb + (size_t)(t0 + j) * kv_dim, hd, gdot, vec), scale);
            if (tiles == 1) sm.buf[j] = sc;
            mx = fmaxf(mx, sc);
        }
    }
    mx = warp_max(mx);
    if ((tid & 31) == 0) sm.red[tid >> 5] = mx;
    __syncthreads();
    if (tid < 32) {
        float m = tid < ATT_THREADS / 32 ? sm.red[tid] : NEG_INF;
        m = warp_max(m);
        if (tid == 0) sm.mx = m;
    }
    __syncthreads();
    mx = sm.mx;
    // 2. The numerators and their sum: 8-sums in f32, added in f64 in order (one thread; for
    // one tile, a tree proved to give the same 1 / sum).
    double sum = 0.0;
    for (int tt = 0; tt < tiles; ++tt) {
        const int t0 = tt * ATT_TILE, n = min(len - t0, ATT_TILE);
        for (int j = tid; j < n; j += ATT_THREADS) {
            const float sc = tiles == 1
                                 ? sm.buf[j]
                                 : __fmul_rn(score_dot(sm.q, kb + (size_t)(t0 + j) * kv_dim, hd,
                                                       gdot, vec),
                                             scale);
            sm.buf[j] = ggml_exp(__fsub_rn(sc, mx));
        }
        __syncthreads();
        const int nch = (n + 7) / 8;
        for (int c = tid; c < nch; c += ATT_THREADS) {
            float a[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) a[k] = 8 * c + k < n ? sm.buf[8 * c + k] : 0.0f;
            sm.cs[c] = hsum8_arr(a);
        }
        __syncthreads();
        if (tiles == 1) {
            // One tile: the 8-sums (>= 0) by a tree, the chain's 1 / sum proved equal as in
            // `rms_scale_from` (1 / x and the rounding to f32 are monotone), else the chain.
            double part = 0.0;
            for (int c = tid; c < nch; c += ATT_THREADS) part = __dadd_rn(part, (double)sm.cs[c]);
            for (int o = 16; o > 0; o >>= 1)
                part = __dadd_rn(part, __shfl_xor_sync(0xffffffffu, part, o));
            if ((tid & 31) == 0) sm.red64[tid >> 5] = part;
            __syncthreads();
            if (tid == 0) {
                double t = 0.0;
                for (int w = 0; w < ATT_THREADS / 32; ++w) t = __dadd_rn(t, sm.red64[w]);
                const double rel = (double)nch * 0x1p-50;
                const float lo = __double2float_rn(__ddiv_rn(1.0, __dmul_ru(t, 1.0 + rel)));
                const float hi = __double2float_rn(__ddiv_rn(1.0, __dmul_rd(t, 1.0 - rel)));
                if (isfinite(t) && t > 0.0 && lo == hi) {
                    sm.inv = lo;
                } else {
                    for (int c = 0; c < nch; ++c) sum = __dadd_rn(sum, (double)sm.cs[c]);
                    sm.inv = __double2float_rn(__ddiv_rn(1.0, sum));
                }
            }
            __syncthreads();
            break;
        }
        if (tid == 0)
            for (int c = 0; c < nch; ++c) sum = __dadd_rn(sum, (double)sm.cs[c]);
        __syncthreads();
    }
    if (tiles > 1) {
        if (tid == 0) sm.inv = __double2float_rn(__ddiv_rn(1.0, sum));
        __syncthreads();
    }
    // 3. The probabilities and their weighted sum of the value rows.
    attend_weighted<8, 4>(sm, kb, vb, kv_dim, hd, len, scale, gdot, gsum, vec, out);
}

struct AttnParams {
    const float* q;          // [n_head * head_dim], Hugging Face lane order
    const uint16_t* kcache;  // [n_ctx, kv_dim] f16, keys in the attention's lane order
    const uint16_t* vcache;
    float* out;              // [n_head * head_dim]
    const DecodeState* state;
    int n_head;
    int n_kv;
    int head_dim;
    int kv_dim;
    float scale;             // 1 / sqrt(head_dim), as forward.rs computes it
    int interleaved;         // llama.cpp's interleaved lane order (forward.rs to_lane_order)
    // `attention_cluster` only (0 elsewhere): cache rows of the earlier positions a block
    // copies into its dynamic shared memory before its dependency wait, at most `stage_k`
    // key rows of its chunk and `stage_v` value rows of its dims (the launch's dynamic
    // shared memory holds stage_k * head_dim + stage_v * head_dim / ATTN_CLUSTER f16).
    int stage_k;
    int stage_v;
};

// The decode step: one token (the Gemv order) at the state's position. Grid (n_head).
__device__ __forceinline__ void attention_step(const AttnParams& p) {
    const int h = blockIdx.x, kvh = h / (p.n_head / p.n_kv);
    const int len = (int)p.state->pos + 1;
    attend(p.q + h * p.head_dim, p.kcache + kvh * p.head_dim, p.vcache + kvh * p.head_dim,
           p.kv_dim, p.head_dim, len, p.scale, false, p.interleaved, p.out + h * p.head_dim);
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention(AttnParams p) {
    attention_step(p);
}

// =======================================================================================
// Fused decode kernels (issue 26: fewer launches per token). Each is a product with the
// preparation of its input in the block's prologue (what `prep` did in a launch of its own),
// RoPE and the f16 cache write in the epilogue of the Q/K/V product, and the attention as a
// dependent launch. Same arithmetic as the unfused kernels, operation for operation and sum
// for sum: the same logits, bit for bit.
// ---------------------------------------------------------------------------------------
#define FUSE_WARPS 8
#define PROLOGUE_REGS 8
// Blocks of `prep_matvec` resident per SM at least (registers <= 80): the 384 blocks of a
// 1,536-row gate/up pair in one wave on 132 SMs. The decoder launches at most this many
// blocks per SM (one wave; wider products take several turns per warp, each asking L2 for
// the next turn's row first). Mirrored in src/gpu/kernels.rs.
#define FUSE_MIN_BLOCKS 3

// Programmatic dependent launch (sm_90 and later; PTX ISA 7.8 `griddepcontrol`). A fused
// kernel launched with the programmatic stream serialization attribute may start while the
// previous kernel of the stream still runs: `dependency_wait` blocks until that kernel has
// completed and its writes are visible (a no-op when launched without the attribute), and
// `dependents_launch` lets the next kernel start (its blocks then wait in their own
// `dependency_wait`). Nothing before `dependency_wait` may read what an earlier kernel
// writes, nor write anything: only the weights (constant during a step) are touched there.
__device__ __forceinline__ void dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Ask L2 for the `bytes` bytes at `w`, one 128-byte line per lane and turn, `lanes` lanes
// (`lane` in 0 .. lanes - 1) sharing the row: a whole warp (32), or an 8-lane group of
// `prep_matvec_group`. The weight rows a warp will read first, requested before
// `dependency_wait` so that their HBM latency overlaps the previous kernel and the input's
// preparation. Changes no value. (Loading them into L1 instead, one `ld.global.nc` per line,
// measured 3 % slower per token.)
__device__ __forceinline__ void prefetch_l2(const uint8_t* w, int bytes, int lane, int lanes = 32) {
    for (int o = lane * 128; o < bytes; o += lanes * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(w + o));
}

// The input of a product, as `prep` makes it: v = in (or silu(in) * in2), with `norm`
// v = v / sqrt(mean(v^2) + eps) * norm; into the block's shared memory: the 8-bit blocks
// the weights need (Q8 with q8, Q8_K with q8k), then the n f32 values, in that order.
struct PrologueParams {
    const float* in;
    const float* in2;    // SwiGLU's up projection (with `swiglu`)
    const float* norm;   // RMSNorm weight, or null
    int n;
    float eps;
    int swiglu;
    int q8;
    int q8k;
    int pad;
};

// Fills the shared memory at `smem` (layout above). The input is first staged in shared
// memory (all its loads in flight at once), then normalised in place with `prep`'s scale
// (`rms_scale_block`: the CPU engine's chained f64 sum, reached through a tree and a bound).
// The 8-bit blocks are `prep`'s arithmetic on the same values.
__device__ void prologue(const PrologueParams& p, unsigned char* smem, BlockQ8** q8,
                         BlockQ8K** q8k, float** x) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    BlockQ8* s8 = p.q8 ? (BlockQ8*)smem : nullptr;
    if (p.q8) smem += (p.n / QK) * sizeof(BlockQ8);
    BlockQ8K* s8k = p.q8k ? (BlockQ8K*)smem : nullptr;
    if (p.q8k) smem += (p.n / QK_K) * sizeof(BlockQ8K);
    float* sx = (float*)smem;
    // The norm weight of the first PROLOGUE_REGS * blockDim values, loaded with the input.
    float wreg[PROLOGUE_REGS];
#pragma unroll
    for (int k = 0; k < PROLOGUE_REGS; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        wreg[k] = p.norm && i < p.n ? p.norm[i] : 0.0f;
    }
#pragma unroll 4
    for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
        float v = p.in[i];
        if (p.swiglu) v = silu_mul(v, p.in2[i]);
        sx[i] = v;
    }
    __syncthreads();
    if (p.norm) {
        const float scale = rms_scale_block(sx, p.n, p.eps);
#pragma unroll
        for (int k = 0; k < PROLOGUE_REGS; ++k) {
            const int i = threadIdx.x + k * blockDim.x;
            if (i < p.n) sx[i] = __fmul_rn(__fmul_rn(sx[i], scale), wreg[k]);
        }
        for (int i = threadIdx.x + PROLOGUE_REGS * blockDim.x; i < p.n; i += blockDim.x)
            sx[i] = __fmul_rn(__fmul_rn(sx[i], scale), p.norm[i]);
        __syncthreads();
    }
    if (s8) {
        // Eight lanes per block (four values each), four blocks per warp and turn: the
        // block's largest magnitude (fmaxf) and integer sum do not depend on the order, and
        // each value's arithmetic is `prep`'s, so the same blocks.
        const int g = lane / 8, sub = lane % 8;
        for (int b0 = warp * 4; b0 < p.n / QK; b0 += nw * 4) {
            const int b = b0 + g;
            const bool on = b < p.n / QK;
            float v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) v[k] = on ? sx[b * QK + sub * 4 + k] : 0.0f;
            float amax = fabsf(v[0]);
#pragma unroll
            for (int k = 1; k < 4; ++k) amax = fmaxf(amax, fabsf(v[k]));
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float d = __fdiv_rn(amax, 127.0f);
            const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
            int sum = 0;
            uint32_t packed = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int r = __float2int_rn(__fmul_rn(v[k], id));
                sum += r;
                packed |= (uint32_t)(uint8_t)(int8_t)r << (8 * k);
            }
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (on) {
                *(uint32_t*)(s8[b].qs + sub * 4) = packed;  // qs at byte 8 of a 40-byte block
                if (sub == 0) {
                    s8[b].d = round_f16(d);
                    s8[b].s = round_f16(__fmul_rn(d, (float)sum));
                }
            }
        }
    }
    if (s8k) {
        for (int b = warp; b < p.n / QK_K; b += nw) {
            const float* xb = sx + b * QK_K;
            float amax = 0.0f, mx = 0.0f;
            int at = 0x7fffffff;
            for (int k = 0; k < 8; ++k) {
                const int i = lane * 8 + k;
                const float a = fabsf(xb[i]);
                if (a > amax) { amax = a; mx = xb[i]; at = i; }
            }
            for (int o = 16; o > 0; o >>= 1) {
                const float a2 = __shfl_xor_sync(0xffffffffu, amax, o);
                const float m2 = __shfl_xor_sync(0xffffffffu, mx, o);
                const int at2 = __shfl_xor_sync(0xffffffffu, at, o);
                if (a2 > amax || (a2 == amax && at2 < at)) { amax = a2; mx = m2; at = at2; }
            }
            BlockQ8K* out = s8k + b;
            if (amax == 0.0f) {
                for (int k = 0; k < 8; ++k) out->qs[lane * 8 + k] = 0;
                if (lane < 16) out->bsums[lane] = 0;
                if (lane == 0) out->d = 0.0f;
                continue;
            }
            const float iscale = __fdiv_rn(-127.0f, mx);
            int part = 0;
            for (int k = 0; k < 8; ++k) {
                int q = __float2int_rn(__fmul_rn(iscale, xb[lane * 8 + k]));
                q = q < 127 ? q : 127;
                out->qs[lane * 8 + k] = (int8_t)q;
                part += q;
            }
            const int other = __shfl_down_sync(0xffffffffu, part, 1);
            if (lane % 2 == 0) out->bsums[lane / 2] = (int16_t)(part + other);
            if (lane == 0) out->d = __fdiv_rn(1.0f, iscale);
        }
    }
    __syncthreads();
    *q8 = s8;
    *q8k = s8k;
    *x = sx;
}

// ---------------------------------------------------------------------------------------
// prep_matvec: `prep` + `matvec` in one launch: each block prepares the input in its shared
// memory (prologue above), then each warp takes rows r = block * FUSE_WARPS + warp, then
// + gridDim.x * FUSE_WARPS, ...; the row's dot product is `row_dot_warp` (the lane form's
// chains, as `matvec`'s `row_dot8`), its epilogue (bias, residual accumulation) `matvec`'s.
// Blocks of FUSE_WARPS warps; dynamic shared memory: the
// prologue's formats.
// ---------------------------------------------------------------------------------------
struct PrepMatVecParams {
    PrologueParams in;
    Proj p[3];
    int nproj;
    int rows_total;
    int ahead;   // turns whose rows are asked of L2 ahead of their turn (>= 1; the host sizes
                 // them to a third of the L2 cache: the head's rows all at once on an H200)
    int pad;
};

// The epilogue of row r of projection pr: bias, then store or residual accumulation.
__device__ __forceinline__ void store_row(const Proj& pr, int r, float v) {
    if (pr.bias) v = __fadd_rn(v, pr.bias[r]);
    pr.out[r] = pr.accumulate ? __fadd_rn(pr.out[r], v) : v;
}

// The body of `prep_matvec` and `prep_matvec_wide` (below).
template <int CH>
__device__ __forceinline__ void prep_matvec_body(const PrepMatVecParams& p, unsigned char* smem) {
    BlockQ8* q8;
    BlockQ8K* q8k;
    float* x;
    const int lane = threadIdx.x % 32;
    // Rows of warp w: one per turn (`row_dot_warp`).
    const int first = blockIdx.x * FUSE_WARPS + threadIdx.x / 32;
    const int step = gridDim.x * FUSE_WARPS;
    // The first row's weights: in registers (8-bit block types) or asked of L2.
    uint32_t dm0[CH][1], v0[CH][1];
    bool pre = false;
    if (first < p.rows_total) {
        int r;
        const Proj& pr = p.p[proj_of(p.p, p.nproj, p.rows_total, first, &r)];
        const uint8_t* w[1] = {pr.w + (size_t)r * pr.row_bytes};
        pre = is_q32(pr.type);
        if (pre) q32_preload<1, CH>(pr.type, w, p.in.n, dm0, v0);
        else prefetch_l2(w[0], pr.row_bytes, lane);
    }
    // The rows of turns 1 .. ahead - 1 asked of L2 now too (weights only: before the wait).
    const int ahead = max(1, p.ahead);
    for (int t = 1; t < ahead && first + t * step < p.rows_total; ++t) {
        int rt;
        const Proj& pt = p.p[proj_of(p.p, p.nproj, p.rows_total, first + t * step, &rt)];
        prefetch_l2(pt.w + (size_t)rt * pt.row_bytes, pt.row_bytes, lane);
    }
    dependency_wait();
    dependents_launch();
    prologue(p.in, smem, &q8, &q8k, &x);
    for (int r0 = first; r0 < p.rows_total; r0 += step) {
        int r;
        const int k = proj_of(p.p, p.nproj, p.rows_total, r0, &r);
        const Proj& pr = p.p[k];
        const uint8_t* w[1] = {pr.w + (size_t)r * pr.row_bytes};
        if (r0 + ahead * step < p.rows_total) {  // the row `ahead` turns on, asked of L2 now
            int rn;
            const Proj& pn = p.p[proj_of(p.p, p.nproj, p.rows_total, r0 + ahead * step, &rn)];
            prefetch_l2(pn.w + (size_t)rn * pn.row_bytes, pn.row_bytes, lane);
        }
        float dot[1];
        if (pre && r0 == first) q32_dot_preloaded<1, CH>(pr.type, w, p.in.n, q8, dm0, v0, dot);
        else row_dot_warp<1>(pr.type, w, p.in.n, x, q8, q8k, dot);
        if (lane == 0) store_row(pr, r, dot[0]);
    }
}

// A grid of up to FUSE_MIN_BLOCKS blocks per SM (gate/up, the head): at most 80 registers a
// thread, so that the blocks of one wave are resident at once.
extern "C" __global__ void __launch_bounds__(FUSE_WARPS * 32, FUSE_MIN_BLOCKS) prep_matvec(PrepMatVecParams p) {
    extern __shared__ __align__(16) unsigned char smem[];
    prep_matvec_body<CH32>(p, smem);
}

// A grid of at most one block per SM (the 576-row O and down projections of a small model):
// the same arithmetic without the register cap, which spills (ptxas: 34 bytes stored and 76
// loaded a thread under it).
extern "C" __global__ void __launch_bounds__(FUSE_WARPS * 32, 1) prep_matvec_wide(PrepMatVecParams p) {
    extern __shared__ __align__(16) unsigned char smem[];
    prep_matvec_body<CH32_WIDE>(p, smem);
}

// ---------------------------------------------------------------------------------------
// qkv_rope: the Q, K, V products of a layer with their input's preparation (RMSNorm and
// 8-bit blocks) in the prologue and `rope`'s epilogue: work item i is a rotated pair of Q
// (i < n_head * half: rows (h, j) and (h, j + half)), then a pair of K (rotated, written to
// K and, f16, to the cache at the state's position), then a row of V (written to V and the
// cache). One warp per item and turn, as `prep_matvec`; the two rows of an item are one
// `row_dot_warp`, the rotation and the f16 stores `rope`'s.
// ---------------------------------------------------------------------------------------
struct QkvRopeParams {
    PrologueParams in;
    Proj p[3];                // Q, K, V (rows n_head * head_dim, kv_dim, kv_dim)
    const float* angles;      // [n_ctx, head_dim] as `rope`'s
    const DecodeState* state;
    uint16_t* kcache;         // [n_ctx, kv_dim] f16 of this layer
    uint16_t* vcache;
    int n_head;
    int n_kv;
    int head_dim;
    int items;                // (n_head + n_kv) * head_dim / 2 + n_kv * head_dim / 2
    int form;                 // ROPE_FUSED | ROPE_INTERLEAVED
    int pad;
};

extern "C" __global__ void __launch_bounds__(FUSE_WARPS * 32) qkv_rope(QkvRopeParams p) {
    extern __shared__ __align__(16) unsigned char smem[];
    BlockQ8* q8;
    BlockQ8K* q8k;
    float* x;
    const int lane = threadIdx.x % 32;
    const int half = p.head_dim / 2, kv_dim = p.n_kv * p.head_dim;
    const int q_pairs = p.n_head * half, k_pairs = p.n_kv * half;
    // Items of warp w: one per turn.
    const int first = blockIdx.x * FUSE_WARPS + threadIdx.x / 32;
    const int step = gridDim.x * FUSE_WARPS;
    // Item it: its projection and its two rows (a rotated pair of Q or K, or V rows 2v, 2v + 1).
    auto rows_of = [&](int it, int* ra, int* rb, int* h, int* i) -> const Proj& {
        const bool is_v = it >= q_pairs + k_pairs;
        const bool is_k = !is_v && it >= q_pairs;
        if (is_v) {
            *ra = 2 * (it - q_pairs - k_pairs);
            *rb = *ra + 1;
            return p.p[2];
        }
        const int t = is_k ? it - q_pairs : it;
        *h = t / half;
        *i = t % half;
        *ra = *h * p.head_dim + *i;
        *rb = *ra + half;
        return is_k ? p.p[1] : p.p[0];
    };
    // The first item's weights: in registers (8-bit block types) or asked of L2.
    uint32_t dm0[CH32][2], v0[CH32][2];
    bool pre = false;
    if (first < p.items) {
        int ra, rb, h, i;
        const Proj& pr = rows_of(first, &ra, &rb, &h, &i);
        const uint8_t* w[2] = {pr.w + (size_t)ra * pr.row_bytes, pr.w + (size_t)rb * pr.row_bytes};
        pre = is_q32(pr.type);
        if (pre) {
            q32_preload<2, CH32>(pr.type, w, p.in.n, dm0, v0);
        } else {
            prefetch_l2(w[0], pr.row_bytes, lane);
            prefetch_l2(w[1], pr.row_bytes, lane);
        }
    }
    dependency_wait();
    dependents_launch();
    prologue(p.in, smem, &q8, &q8k, &x);
    const uint32_t pos = p.state->pos;
    const float* ang = p.angles + (size_t)pos * p.head_dim;
    const int il = p.form & ROPE_INTERLEAVED;
    for (int it = first; it < p.items; it += step) {
        const bool is_v = it >= q_pairs + k_pairs;
        const bool is_k = !is_v && it >= q_pairs;
        int ra, rb, h = 0, i = 0;
        const Proj& pr = rows_of(it, &ra, &rb, &h, &i);
        const uint8_t* w[2] = {pr.w + (size_t)ra * pr.row_bytes, pr.w + (size_t)rb * pr.row_bytes};
        float dots[2];
        if (pre && it == first) q32_dot_preloaded<2, CH32>(pr.type, w, p.in.n, q8, dm0, v0, dots);
        else row_dot_warp<2>(pr.type, w, p.in.n, x, q8, q8k, dots);
        if (lane == 0) {
            float a = dots[0], b = dots[1];
            if (pr.bias) {
                a = __fadd_rn(a, pr.bias[ra]);
                b = __fadd_rn(b, pr.bias[rb]);
            }
            if (is_v) {
                pr.out[ra] = a;
                pr.out[rb] = b;
                p.vcache[(size_t)pos * kv_dim + ra] = f2h(a);
                p.vcache[(size_t)pos * kv_dim + rb] = f2h(b);
            } else {
                float na, nb;
                rope_pair(a, b, ang[i], ang[half + i], p.form & ROPE_FUSED, &na, &nb);
                pr.out[ra] = na;
                pr.out[rb] = nb;
                if (is_k) {
                    const size_t at = (size_t)pos * kv_dim + h * p.head_dim;
                    p.kcache[at + lane_slot(i, half, il)] = f2h(na);
                    p.kcache[at + lane_slot(i + half, half, il)] = f2h(nb);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// attention_fused: `attention` as a (programmatic dependent) launch of the fused step.
// ---------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_fused(AttnParams p) {
    dependency_wait();
    dependents_launch();
    attention_step(p);
}

// ---------------------------------------------------------------------------------------
// attention_cluster: `attention_fused`'s values (the same operations on the same values, so
// the same bits) from a thread block cluster of ATTN_CLUSTER blocks per query head instead
// of one block (compute capability 9.0 and later; launched with the cluster dimension, grid
// n_head * ATTN_CLUSTER; spans of at most ATT_TILE positions). Block b of head h:
//  1. scores of positions [b * chunk, (b + 1) * chunk) (chunk: len / ATTN_CLUSTER rounded up
//     to a multiple of 8, so each 8-sum lies in one block), their maximum written into every
//     block's shared memory (distributed shared memory); cluster barrier; the maximum of the
//     ATTN_CLUSTER maxima (order-free);
//  2. numerators and 8-sums of its positions, the 8-sums written into every block, their
//     f64 sum (a tree) written into every block; cluster barrier; each block adds the
//     ATTN_CLUSTER partial sums in rank order and proves, as `attend`, that the chain's
//     1 / sum rounds to that f32 (else runs the chain over every 8-sum in position order);
//  3. probabilities of its positions written into every block; cluster barrier;
//  4. the weighted sums of dims [b * hd / ATTN_CLUSTER, ...) for all 32 slots: slot sl of
//     dim d is `weighted_tile`'s chain fma(v_j[d], p_j, acc) over j = sl, sl + 32, ... in
//     order; then `reduce_gemv` of the 32 slots per dim.
// After the third barrier no block touches another's shared memory, so blocks may exit.
// ---------------------------------------------------------------------------------------
#define ATTN_CLUSTER 8

struct AttnClusterShared {
    float p[ATT_TILE];                    // every position's probability
    float cs[ATT_TILE / 8];               // every 8-sum
    float e[ATT_TILE / ATTN_CLUSTER];     // this block's scores, then numerators
    float acc[32 * (MAX_HEAD_DIM / ATTN_CLUSTER)];  // [slot][dim of this block]
    float q[MAX_HEAD_DIM];
    double psum[ATTN_CLUSTER];
    float pmax[ATTN_CLUSTER];
    double red64[ATT_THREADS / 32];
    float red[ATT_THREADS / 32];
    float inv;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// Every thread of every block of the cluster: arrive (release) and wait (acquire).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The address of `p` (this block's shared memory) in block `rank`'s shared memory.
__device__ __forceinline__ uint32_t cluster_addr(const void* p, uint32_t rank) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}

// v into every block's copy of `*p`.
__device__ __forceinline__ void st_all(const float* p, float v) {
#pragma unroll
    for (uint32_t r = 0; r < ATTN_CLUSTER; ++r)
        asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(cluster_addr(p, r)), "f"(v) : "memory");
}

__device__ __forceinline__ void st_all(const double* p, double v) {
#pragma unroll
    for (uint32_t r = 0; r < ATTN_CLUSTER; ++r)
        asm volatile("st.shared::cluster.f64 [%0], %1;" ::"r"(cluster_addr(p, r)), "d"(v) : "memory");
}
#endif

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_cluster(AttnParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ AttnClusterShared sm;
    extern __shared__ __align__(16) unsigned char att_stage[];
    const int tid = threadIdx.x, hd = p.head_dim, kv_dim = p.kv_dim;
    const int h = blockIdx.x / ATTN_CLUSTER;
    const uint32_t rank = cluster_rank();
    const int kvh = h / (p.n_head / p.n_kv);
    const uint16_t* kb = p.kcache + kvh * hd;
    const uint16_t* vb = p.vcache + kvh * hd;
    // The position: only the step's last kernel (the sampler) changes it, so it is read
    // before the wait, as `layer` does.
    const int len = (int)p.state->pos + 1;
    const int chunk = ((len + ATTN_CLUSTER - 1) / ATTN_CLUSTER + 7) / 8 * 8;
    const int lo = (int)rank * chunk, n = max(0, min(len, lo + chunk) - lo);
    const int dpb = hd / ATTN_CLUSTER, d0 = (int)rank * dpb;
    // The cache rows of the earlier positions (rows 0 .. len - 1; earlier steps wrote them,
    // nothing in this step does) into shared memory while the previous kernel runs: this
    // block's key rows [lo, lo + nk) and its dims' value rows [0, nv), 16 bytes a copy. The
    // row of this position (the previous kernel writes it) is read from the cache after the
    // wait. The same values either way: the copies change where they are read, not what.
    uint16_t* ks = (uint16_t*)att_stage;
    uint16_t* vs = ks + (size_t)p.stage_k * hd;
    const int nk = len <= ATT_TILE ? max(0, min(min(n, len - 1 - lo), p.stage_k)) : 0;
    const int nv = len <= ATT_TILE && dpb % 8 == 0 ? min(len - 1, p.stage_v) : 0;
    for (int t = tid; t < nk * (hd / 8); t += ATT_THREADS) {
        const int j = t / (hd / 8), c = (t % (hd / 8)) * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                         (uint32_t)__cvta_generic_to_shared(ks + (size_t)j * hd + c)),
                     "l"(kb + (size_t)(lo + j) * kv_dim + c) : "memory");
    }
    for (int t = tid; t < nv * (dpb / 8); t += ATT_THREADS) {
        const int j = t / (dpb / 8), c = (t % (dpb / 8)) * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                         (uint32_t)__cvta_generic_to_shared(vs + (size_t)j * dpb + c)),
                     "l"(vb + (size_t)j * kv_dim + d0 + c) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    dependency_wait();
    dependents_launch();
    // The host launches this kernel only for a context of at most ATT_TILE positions; a
    // longer span (the same for every block, before any cluster barrier) gives NaN, not a
    // write past the shared arrays.
    if (len > ATT_TILE) {
        for (int d = (int)rank * (hd / ATTN_CLUSTER) + tid; d < ((int)rank + 1) * (hd / ATTN_CLUSTER);
             d += ATT_THREADS)
            p.out[h * hd + d] = __int_as_float(0x7fc00000);
        return;
    }
    // Every block of the cluster has started before any writes into another's memory.
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    for (int i = tid; i < hd; i += ATT_THREADS)
        sm.q[lane_slot(i, hd / 2, p.interleaved)] = round_f16(p.q[h * hd + i]);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    // 1. Scores and their maximum.
    float mx = score_rows(sm.q, kb, (size_t)lo, kv_dim, hd, false, tid, n, ATT_THREADS, p.scale, sm.e,
                          ks, nk);
    mx = warp_max(mx);
    if ((tid & 31) == 0) sm.red[tid >> 5] = mx;
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    __syncthreads();
    if (tid == 0) {
        float m = sm.red[0];
        for (int w = 1; w < ATT_THREADS / 32; ++w) m = fmaxf(m, sm.red[w]);
        st_all(&sm.pmax[rank], m);
    }
    cluster_sync();
    mx = sm.pmax[0];
#pragma unroll
    for (int r = 1; r < ATTN_CLUSTER; ++r) mx = fmaxf(mx, sm.pmax[r]);
    // 2. Numerators, 8-sums, their sum.
    for (int j = tid; j < n; j += ATT_THREADS) sm.e[j] = ggml_exp(__fsub_rn(sm.e[j], mx));
    __syncthreads();
    double part = 0.0;
    for (int c = tid; c < (n + 7) / 8; c += ATT_THREADS) {
        float a[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) a[k] = 8 * c + k < n ? sm.e[8 * c + k] : 0.0f;
        const float s8 = hsum8_arr(a);
        st_all(&sm.cs[lo / 8 + c], s8);
        part = __dadd_rn(part, (double)s8);
    }
    for (int o = 16; o > 0; o >>= 1) part = __dadd_rn(part, __shfl_xor_sync(0xffffffffu, part, o));
    if ((tid & 31) == 0) sm.red64[tid >> 5] = part;
    __syncthreads();
    if (tid == 0) {
        double t = 0.0;
        for (int w = 0; w < ATT_THREADS / 32; ++w) t = __dadd_rn(t, sm.red64[w]);
        st_all(&sm.psum[rank], t);
    }
    cluster_sync();
    if (tid == 0) {
        double t = 0.0;
        for (int r = 0; r < ATTN_CLUSTER; ++r) t = __dadd_rn(t, sm.psum[r]);
        const int nch = (len + 7) / 8;
        const double rel = (double)nch * 0x1p-50;
        const float flo = __double2float_rn(__ddiv_rn(1.0, __dmul_ru(t, 1.0 + rel)));
        const float fhi = __double2float_rn(__ddiv_rn(1.0, __dmul_rd(t, 1.0 - rel)));
        if (isfinite(t) && t > 0.0 && flo == fhi) {
            sm.inv = flo;
        } else {
            double sum = 0.0;
            for (int c = 0; c < nch; ++c) sum = __dadd_rn(sum, (double)sm.cs[c]);
            sm.inv = __double2float_rn(__ddiv_rn(1.0, sum));
        }
    }
    __syncthreads();
    // 3. Probabilities.
    const float inv = sm.inv;
    for (int j = tid; j < n; j += ATT_THREADS) st_all(&sm.p[lo + j], round_f16(__fmul_rn(sm.e[j], inv)));
    cluster_sync();
    // 4. The weighted sums of this block's dims, then the 32 slots' sum per dim (rows below
    // nv from the staged copy).
    for (int u = tid; u < 32 * dpb; u += ATT_THREADS) {
        const int sl = u / dpb, dl = u % dpb;
        const uint16_t* col = vb + d0 + dl;
        const uint16_t* scol = vs + dl;
        const auto value = [&](int i) {
            return h2f(i < nv ? scol[(size_t)i * dpb] : col[(size_t)i * kv_dim]);
        };
        float acc = 0.0f;
        int j = sl;
        for (; j + 15 * 32 < len; j += 16 * 32) {
            float v[16];
#pragma unroll
            for (int r = 0; r < 16; ++r) v[r] = value(j + 32 * r);
#pragma unroll
            for (int r = 0; r < 16; ++r) acc = __fmaf_rn(v[r], sm.p[j + 32 * r], acc);
        }
        for (; j < len; j += 32) acc = __fmaf_rn(value(j), sm.p[j], acc);
        sm.acc[sl * dpb + dl] = acc;
    }
    __syncthreads();
    for (int dl = tid; dl < dpb; dl += ATT_THREADS) {
        float s[32];
#pragma unroll
        for (int l = 0; l < 32; ++l) s[l] = sm.acc[l * dpb + dl];
        p.out[h * hd + d0 + dl] = reduce_gemv_arr(s);
    }
#else
    __trap();  // launched only on compute capability 9.0 and later
#endif
}

// ---------------------------------------------------------------------------------------
// layer: a whole Llama-style layer of the decode step in one launch of one thread block
// cluster of LAYER_CLUSTER blocks (compute capability 9.0 and later; launched with the
// cluster dimension, a grid of LAYER_CLUSTER blocks, programmatic dependent launches; the
// host takes it only where every matrix of the layer is Q8_0 / Q4_0 / Q4_1, no projection
// has a bias and the block's slice of the weights fits its shared memory). The layer's five
// fused launches (`qkv_rope`, `attention_fused`, `prep_matvec` x 3) become phases of one
// kernel separated by cluster barriers; what a kernel boundary handed on through global
// memory (Q, the attention output, the residual after the output projection, the SwiGLU
// product) is written into every block's shared memory (distributed shared memory) instead.
// Every value is computed by the same device functions in the same order as the fused
// kernels (`prologue`, `rope_pair`, `attend`, `silu_mul`, the epilogues' additions); a row's
// dot product is `row_dot8`'s lane form (8 lanes a row, each lane its own chain over the
// blocks, then the fixed 8-lane tree), the chains `row_dot_warp` reproduces with shuffles.
// The weights are in shared memory here, so the plain form, with no shuffle per block, is
// the fast one (the shuffles bound `row_dot_warp` when 16 SMs do a layer's rows); the logits
// stay the CPU engine's bit for bit.
//
// Block b's rows of each phase (n / LAYER_CLUSTER rounded up, the last block fewer): items
// [b * per, ...) of `qkv_rope` (rotated pairs of Q, of K, pairs of V rows), output rows,
// gate and up rows, down rows. Before `griddepcontrol.wait` the block copies all of them
// into its shared memory (`cp.async`, 4 bytes a copy: rows are only 4-byte aligned), so a
// layer's weights load while the earlier layers run; `griddepcontrol.launch_dependents`
// comes first of all, so the next layers start (and load theirs) as soon as SMs are free.
// Phases after the wait:
//  A. prologue of the residual (RMSNorm, Q8 blocks); the block's Q/K/V items, rotated; Q
//     into every block's `q`, K and V (f16) into the cache at the state's position
//     (global memory, visible to the cluster after the barrier); cluster barrier;
//  B. attention of heads b, b + LAYER_CLUSTER, ... (`attend`, one block per head, reading
//     the cache as `attention_fused`), each head's output into every block's `att`;
//     cluster barrier;
//  C. prologue of `att`; the block's output rows: x1[r] = x[r] + dot (the residual) into
//     every block's `x1`; cluster barrier;
//  D. prologue of `x1` with the FFN norm; the block's gate and up rows, silu(g) * u
//     (`silu_mul`) into every block's `hbuf`; cluster barrier;
//  E. prologue of `hbuf`; the block's down rows: x[r] = x1[r] + dot into the residual.
// No block touches another's shared memory after the fourth barrier, so blocks may exit.
// The layer's tail (`LayerParams::att` set, the steps from `GpuOptions::layer_kernel_below`
// on): A and B skipped, every block's `att` copied from the attention output the launch
// before (`attention_cluster` or `attention_fused`) wrote, then C, D, E. Paired
// (`LayerParams::q_out` set too): E also writes the new residual into every block's `qv`;
// cluster barrier; then A of the next layer (its norm; its Q/K/V rows, in the slice's Q/K/V
// region; K and V into its cache, Q into `q_out` in global memory): no shared memory of
// another block is touched after that barrier.
// ---------------------------------------------------------------------------------------
#define LAYER_CLUSTER 16
// `attend` strides over ATT_THREADS threads and sizes its reductions by them; `layer` runs it
// in blocks of FUSE_WARPS warps.
static_assert(FUSE_WARPS * 32 == ATT_THREADS, "layer runs attend: one block size");

// One matrix of the layer: `[rows, cols]` rows of `row_bytes` bytes of ggml type `type`.
struct LayerMat {
    const uint8_t* w;
    int type;
    int row_bytes;
};

struct LayerParams {
    float* x;                   // the residual [width]: read in A, written in E
    const float* attn_norm;     // [width]
    const float* ffn_norm;      // [width]
    LayerMat m[7];              // q, k, v, o, gate, up, down
    const float* angles;        // as `qkv_rope`'s
    const DecodeState* state;
    uint16_t* kcache;           // [n_ctx, kv_dim] f16 of this layer
    uint16_t* vcache;
    int width;                  // n_embd (= n_head * head_dim)
    int ffn;                    // n_ff
    int n_head;
    int n_kv;
    int head_dim;
    int form;                   // ROPE_FUSED | ROPE_INTERLEAVED
    float eps;                  // RMSNorm epsilon
    float scale;                // 1 / sqrt(head_dim), as `AttnParams::scale`
    int slice_bytes;            // the weight slice of the largest block (layer_slice)
    int pad;
    int kv_rows;                // the cache's positions (n_ctx): rows [0, min(pos, kv_rows))
                                // of K and V are asked of L2 before the wait; 0: none
    int pad2;
    const float* att;           // the layer's tail only (`layer`; null in `layers_grid`):
                                // the attention output [width] that the launch before
                                // wrote; phases A and B are skipped and C reads it
    // The tail paired with the next layer's Q/K/V (`q_out` set; with `att`): after E, phase
    // A of the next layer on the new residual, Q into `q_out` for its `attention_cluster`.
    const float* next_norm;     // the next layer's attention norm [width]
    LayerMat next_m[3];         // its Q, K, V (row bytes equal to this layer's)
    uint16_t* next_k;           // its cache [n_ctx, kv_dim] f16
    uint16_t* next_v;
    float* q_out;               // its rotated Q [n_head * head_dim], f32
};

#define LM_Q 0
#define LM_K 1
#define LM_V 2
#define LM_O 3
#define LM_GATE 4
#define LM_UP 5
#define LM_DOWN 6

// Where block b's rows of each phase lie in its weight slice (byte offsets, each region
// 16-byte aligned) and how many there are. Mirrored by `layer_slice` in src/gpu/kernels.rs.
struct LayerSlice {
    int items, item0, n_items;   // Q/K/V items of all blocks, this block's first and count
    int o0, n_o;                 // output rows
    int f0, n_f;                 // gate rows = up rows
    int d0, n_d;                 // down rows
    int off_item, off_o, off_gate, off_up, off_down, bytes;
    int item_stride;             // bytes of one item's two rows (the widest of Q, K, V)
};

__device__ __forceinline__ int align16(int v) { return (v + 15) & ~15; }

__device__ __forceinline__ void layer_range(int n, int b, int nb, int* r0, int* count) {
    const int per = (n + nb - 1) / nb;
    *r0 = min(n, b * per);
    *count = min(n, *r0 + per) - *r0;
}

// Block b of nb's slice (`layer`: nb = LAYER_CLUSTER; `layers_grid`: the grid's blocks).
__device__ LayerSlice layer_slice(const LayerParams& p, int b, int nb) {
    LayerSlice s;
    const int half = p.head_dim / 2, kv_dim = p.n_kv * p.head_dim;
    s.items = (p.n_head + p.n_kv) * half + kv_dim / 2;
    layer_range(s.items, b, nb, &s.item0, &s.n_items);
    layer_range(p.width, b, nb, &s.o0, &s.n_o);
    layer_range(p.ffn, b, nb, &s.f0, &s.n_f);
    layer_range(p.width, b, nb, &s.d0, &s.n_d);
    s.item_stride = 2 * max(p.m[LM_Q].row_bytes, max(p.m[LM_K].row_bytes, p.m[LM_V].row_bytes));
    s.off_item = 0;
    s.off_o = align16(s.off_item + s.n_items * s.item_stride);
    s.off_gate = align16(s.off_o + s.n_o * p.m[LM_O].row_bytes);
    s.off_up = align16(s.off_gate + s.n_f * p.m[LM_GATE].row_bytes);
    s.off_down = align16(s.off_up + s.n_f * p.m[LM_UP].row_bytes);
    s.bytes = align16(s.off_down + s.n_d * p.m[LM_DOWN].row_bytes);
    return s;
}

// Item it of `qkv_rope`: its matrix (LM_Q, LM_K, LM_V) and its two rows (a rotated pair
// (h, i), (h, i + half) of Q or K; V rows 2v, 2v + 1).
__device__ __forceinline__ int layer_item(const LayerParams& p, int it, int* ra, int* rb, int* h, int* i) {
    const int half = p.head_dim / 2, kv_dim = p.n_kv * p.head_dim;
    const int q_pairs = p.n_head * half, k_pairs = p.n_kv * half;
    (void)kv_dim;
    if (it >= q_pairs + k_pairs) {
        *ra = 2 * (it - q_pairs - k_pairs);
        *rb = *ra + 1;
        *h = 0;
        *i = 0;
        return LM_V;
    }
    const bool is_k = it >= q_pairs;
    const int t = is_k ? it - q_pairs : it;
    *h = t / half;
    *i = t % half;
    *ra = *h * p.head_dim + *i;
    *rb = *ra + half;
    return is_k ? LM_K : LM_Q;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// `bytes` bytes (a multiple of 4, both addresses 4-aligned) from global memory into this
// block's shared memory, asynchronously (`cp.async`, completed by `cp_async_wait_all`).
__device__ __forceinline__ void cp_async_bytes(uint8_t* dst, const uint8_t* src, int bytes) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    for (int o = threadIdx.x * 4; o < bytes; o += blockDim.x * 4)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d + o), "l"(src + o) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_all;" ::: "memory");
}

// v into every block's copy of `*p`: lane l of an 8-lane group writes the copies of blocks
// l, l + 8, ... (all 8 lanes call it with the same v).
__device__ __forceinline__ void st_cluster_group(const float* p, float v, int l) {
#pragma unroll
    for (uint32_t r = (uint32_t)l; r < LAYER_CLUSTER; r += 8)
        asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(cluster_addr(p, r)), "f"(v) : "memory");
}

// Lane l's chains of R rows of one Q8_0 / Q4_0 / Q4_1 type (`row_dot8`'s lane form: block
// after block in order, acc = fma(a_u, b_u, acc), Q4_1's ext = fma(c_u, d_u, ext), each block's
// terms `q32_terms`), the rows read from shared memory. No shuffles: the 8 lanes of a group
// may run it while other groups of the warp take another type; `group_finish` then sums.
template <int TYPE, int R>
__device__ __forceinline__ void q32_lane_chain(const uint8_t* const* w, int nu, const BlockQ8* q8,
                                               int l, float* acc, float* ext) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = ext[r] = 0.0f;
#pragma unroll 6
    for (int u = 0; u < nu; ++u) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            uint32_t dm, v;
            float a, b, c, d;
            q32_raw<TYPE>(w[r], u, l, &dm, &v);
            q32_terms<TYPE>(dm, v, u, l, q8, &a, &b, &c, &d);
            acc[r] = __fmaf_rn(a, b, acc[r]);
            if (TYPE == T_Q4_1) ext[r] = __fmaf_rn(c, d, ext[r]);
        }
    }
}

template <int R>
__device__ __forceinline__ void q32_lane(int type, const uint8_t* const* w, int cols,
                                         const BlockQ8* q8, int l, float* acc, float* ext) {
    switch (type) {
        case T_Q8_0: q32_lane_chain<T_Q8_0, R>(w, cols / QK, q8, l, acc, ext); break;
        case T_Q4_0: q32_lane_chain<T_Q4_0, R>(w, cols / QK, q8, l, acc, ext); break;
        default: q32_lane_chain<T_Q4_1, R>(w, cols / QK, q8, l, acc, ext); break;
    }
}

// The row's dot product from its lane chains (every lane of the group gets it): the fixed
// 8-lane tree (`hsum8_group`), then Q4_1's + ext, as `row_dot_warp_t`. All 32 lanes call it.
__device__ __forceinline__ float group_finish(int type, float acc, float ext) {
    const float h = hsum8_group(acc);
    return type == T_Q4_1 ? __fadd_rn(h, ext) : h;
}

// ---------------------------------------------------------------------------------------
// prep_matvec_group: `prep_matvec` for a product of one projection of a 32-block type
// (Q8_0 / Q4_0 / Q4_1; the head of most small models is Q8_0). Each 8-lane group takes a row
// a turn, so a warp has four rows in flight instead of one: warp w of the grid's W takes rows
// 4 (w + tW) .. 4 (w + tW) + 4 at turn t, group g the row 4 (w + tW) + g. Lane l of a group
// runs its row's chain itself (`row_dot8`'s lane form, as `q32_lane_chain`: block after block
// in order, acc = fma(a_u, b_u, acc) and Q4_1's ext = fma(c_u, d_u, ext), each block's terms
// `q32_terms`), then `group_finish`'s 8-lane tree: the same operations in the same order as
// `row_dot_warp`, without its shuffles of each block's terms. The blocks are read in rounds
// of GROUP_CH, the next round's words (or the next turn's first) loaded before the current
// round's chain, so a group always has a round in flight; the first round of the first turn
// before `dependency_wait`. The last turn's idle groups repeat the last row and store nothing
// (the tree's shuffles need every lane). Launch bounds as `prep_matvec`'s. The default since
// session 54 (bit-equal, decode +2-3 %); TETHER_LLM_MATVEC_GROUP=0 takes `prep_matvec`.
// ---------------------------------------------------------------------------------------
#define GROUP_CH 8

template <int TYPE>
__device__ __forceinline__ void q32_round(const uint8_t* w, int nu, int u0, int l,
                                          uint32_t dm[GROUP_CH], uint32_t v[GROUP_CH]) {
#pragma unroll
    for (int c = 0; c < GROUP_CH; ++c) q32_raw<TYPE>(w, min(u0 + c, nu - 1), l, &dm[c], &v[c]);
}

template <int TYPE>
__device__ __forceinline__ void prep_matvec_group_t(const PrepMatVecParams& p, unsigned char* smem) {
    BlockQ8* q8;
    BlockQ8K* q8k;
    float* x;
    const int lane = threadIdx.x % 32, g = lane >> 3, l = lane & 7;
    const int wid = blockIdx.x * FUSE_WARPS + threadIdx.x / 32, nw = gridDim.x * FUSE_WARPS;
    const int rows = p.rows_total, rb = p.p[0].row_bytes;
    const uint8_t* const w0 = p.p[0].w;
    const int nu = p.in.n / QK, rounds = (nu + GROUP_CH - 1) / GROUP_CH;
    // This group's row at turn t (the last row past the end).
    auto w_of = [&](int t) { return w0 + (size_t)min(4 * (wid + t * nw) + g, rows - 1) * rb; };
    const int turns = 4 * wid < rows ? (rows - 4 * wid + 4 * nw - 1) / (4 * nw) : 0;
    uint32_t dm[GROUP_CH], v[GROUP_CH], dn[GROUP_CH], vn[GROUP_CH];
    const int ahead = max(1, p.ahead);
    if (turns > 0) q32_round<TYPE>(w_of(0), nu, 0, l, dm, v);
    // The rows of turns 1 .. ahead - 1 asked of L2 (each group its row, a line a lane).
    for (int t = 1; t < ahead && t < turns; ++t) prefetch_l2(w_of(t), rb, l, 8);
    dependency_wait();
    dependents_launch();
    prologue(p.in, smem, &q8, &q8k, &x);
    for (int t = 0; t < turns; ++t) {
        const uint8_t* w = w_of(t);
        if (t + ahead < turns) prefetch_l2(w_of(t + ahead), rb, l, 8);
        float acc = 0.0f, ext = 0.0f;
        for (int j = 0; j < rounds; ++j) {
            // The next round's words: this row's, or the next turn's first.
            if (j + 1 < rounds) q32_round<TYPE>(w, nu, (j + 1) * GROUP_CH, l, dn, vn);
            else if (t + 1 < turns) q32_round<TYPE>(w_of(t + 1), nu, 0, l, dn, vn);
#pragma unroll
            for (int c = 0; c < GROUP_CH; ++c) {
                const int u = j * GROUP_CH + c;
                if (u >= nu) break;  // the same for the whole warp
                float a, b, cc, d;
                q32_terms<TYPE>(dm[c], v[c], u, l, q8, &a, &b, &cc, &d);
                acc = __fmaf_rn(a, b, acc);
                if (TYPE == T_Q4_1) ext = __fmaf_rn(cc, d, ext);
            }
#pragma unroll
            for (int c = 0; c < GROUP_CH; ++c) {
                dm[c] = dn[c];
                v[c] = vn[c];
            }
        }
        const float h = group_finish(TYPE, acc, ext);
        const int r = 4 * (wid + t * nw) + g;
        if (r < rows && l == 0) store_row(p.p[0], r, h);
    }
}

extern "C" __global__ void __launch_bounds__(FUSE_WARPS * 32, FUSE_MIN_BLOCKS) prep_matvec_group(PrepMatVecParams p) {
    extern __shared__ __align__(16) unsigned char smem[];
    switch (p.p[0].type) {
        case T_Q8_0: prep_matvec_group_t<T_Q8_0>(p, smem); break;
        case T_Q4_0: prep_matvec_group_t<T_Q4_0>(p, smem); break;
        default: prep_matvec_group_t<T_Q4_1>(p, smem); break;
    }
}

// Phase A's rows (`qkv_rope`'s epilogue on the same values): the block's Q/K/V items of the
// layer whose Q, K, V are `m` (their rows in the slice `wsl`), from the 8-bit blocks `q8` of
// the normed input, RoPE at `pos`, K and V into the cache rows `kc`, `vc` of `pos`; Q into
// every block's `qv` (distributed shared memory) or, with `q_out`, into global memory. Every
// phase's rows go to the block's 8-lane groups (g, l), one row (or pair) a group and turn; the
// turns are the same for the whole warp (the last turn's idle groups repeat the last row and
// store nothing), so the shuffles of `group_finish` see all 32 lanes.
__device__ __forceinline__ void layer_qkv(const LayerParams& p, const LayerMat* m, const LayerSlice& sl,
                                          const uint8_t* wsl, const BlockQ8* q8, uint16_t* kc,
                                          uint16_t* vc, float* qv, float* q_out, uint32_t pos,
                                          int warp, int g, int l) {
    const int half = p.head_dim / 2, kv_dim = p.n_kv * p.head_dim;
    const float* ang = p.angles + (size_t)pos * p.head_dim;
    const int il = p.form & ROPE_INTERLEAVED;
    for (int k0 = warp * 4; k0 < sl.n_items; k0 += FUSE_WARPS * 4) {
        const bool on = k0 + g < sl.n_items;
        const int k = min(k0 + g, sl.n_items - 1);
        int ra, rb, h, i;
        const int which = layer_item(p, sl.item0 + k, &ra, &rb, &h, &i);
        const LayerMat& mm = m[which];
        const uint8_t* row = wsl + sl.off_item + k * sl.item_stride;
        const uint8_t* w[2] = {row, row + sl.item_stride / 2};
        float acc[2], ext[2];
        q32_lane<2>(mm.type, w, p.width, q8, l, acc, ext);
        // The epilogue of `qkv_rope` (every lane of the group holds the same values).
        const float a = group_finish(mm.type, acc[0], ext[0]), b = group_finish(mm.type, acc[1], ext[1]);
        if (!on) continue;
        if (which == LM_V) {
            if (l == 0) {
                vc[(size_t)pos * kv_dim + ra] = f2h(a);
                vc[(size_t)pos * kv_dim + rb] = f2h(b);
            }
        } else {
            float na, nb;
            rope_pair(a, b, ang[i], ang[half + i], p.form & ROPE_FUSED, &na, &nb);
            if (which == LM_Q) {
                if (q_out == nullptr) {
                    st_cluster_group(&qv[ra], na, l);
                    st_cluster_group(&qv[rb], nb, l);
                } else if (l == 0) {
                    q_out[ra] = na;
                    q_out[rb] = nb;
                }
            } else if (l == 0) {
                const size_t at = (size_t)pos * kv_dim + h * p.head_dim;
                kc[at + lane_slot(i, half, il)] = f2h(na);
                kc[at + lane_slot(i + half, half, il)] = f2h(nb);
            }
        }
    }
}
#endif

#if defined(LAYER_PROFILE)
// Timing harness only (runtime/gpu/s41-layer-prof.cu defines LAYER_PROFILE; the images
// never do): thread 0 of each block stamps %globaltimer and clock64 at the phase
// boundaries, layer p.pad, 16 stamps a block.
__device__ unsigned long long layer_prof[64 * LAYER_CLUSTER * 16][2];
#define LAYER_STAMP(k)                                                                        \
    do {                                                                                      \
        if (threadIdx.x == 0) {                                                               \
            unsigned long long t_;                                                            \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                            \
            const int at_ = ((p.pad & 63) * LAYER_CLUSTER + (int)rank) * 16 + (k);            \
            layer_prof[at_][0] = t_;                                                          \
            layer_prof[at_][1] = (unsigned long long)clock64();                               \
        }                                                                                     \
    } while (0)
#else
#define LAYER_STAMP(k) \
    do {               \
    } while (0)
#endif

extern "C" __global__ void __launch_bounds__(FUSE_WARPS * 32, 1) layer(LayerParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const uint32_t rank = cluster_rank();
    const LayerSlice sl = layer_slice(p, (int)rank, LAYER_CLUSTER);
    LAYER_STAMP(0);
    // Dynamic shared memory: the weight slice, the prologue's area (the widest input), then
    // the values handed between phases.
    uint8_t* wsl = smem;
    unsigned char* pro = smem + p.slice_bytes;
    const int widest = max(p.width, p.ffn);
    float* qv = (float*)(pro + align16(widest / QK * (int)sizeof(BlockQ8)) + align16(widest * 4));
    float* att = qv + p.n_head * p.head_dim;
    float* x1 = att + p.width;
    float* hbuf = x1 + p.width;
    dependents_launch();
    // The layer's tail (p.att set): phases C-E only, after the fused step's QKV and attention
    // launches; its Q/K/V rows are neither loaded nor used. Paired (p.q_out set): then phase
    // A of the next layer, whose Q/K/V rows take this layer's place in the slice.
    const bool tail = p.att != nullptr, pair = tail && p.q_out != nullptr;
    const LayerMat* qkv_m = pair ? p.next_m : p.m;
    // The weights (constant during the step) before the wait.
    for (int k = 0; k < (tail && !pair ? 0 : sl.n_items); ++k) {
        int ra, rb, h, i;
        const LayerMat& m = qkv_m[layer_item(p, sl.item0 + k, &ra, &rb, &h, &i)];
        uint8_t* dst = wsl + sl.off_item + k * sl.item_stride;
        cp_async_bytes(dst, m.w + (size_t)ra * m.row_bytes, m.row_bytes);
        cp_async_bytes(dst + sl.item_stride / 2, m.w + (size_t)rb * m.row_bytes, m.row_bytes);
    }
    cp_async_bytes(wsl + sl.off_o, p.m[LM_O].w + (size_t)sl.o0 * p.m[LM_O].row_bytes,
                   sl.n_o * p.m[LM_O].row_bytes);
    cp_async_bytes(wsl + sl.off_gate, p.m[LM_GATE].w + (size_t)sl.f0 * p.m[LM_GATE].row_bytes,
                   sl.n_f * p.m[LM_GATE].row_bytes);
    cp_async_bytes(wsl + sl.off_up, p.m[LM_UP].w + (size_t)sl.f0 * p.m[LM_UP].row_bytes,
                   sl.n_f * p.m[LM_UP].row_bytes);
    cp_async_bytes(wsl + sl.off_down, p.m[LM_DOWN].w + (size_t)sl.d0 * p.m[LM_DOWN].row_bytes,
                   sl.n_d * p.m[LM_DOWN].row_bytes);
    // The cache rows of the earlier positions, which phase B reads, asked of L2 (one 128-byte
    // line a thread and turn over the cluster): earlier steps wrote them and only the step's
    // last kernel (the sampler) changes the position, so neither is written by a kernel this
    // launch may overlap. A hint: it changes no value.
    if (p.kv_rows > 0) {
        const size_t bytes = (size_t)min(p.state->pos, (uint32_t)p.kv_rows) * p.n_kv * p.head_dim * 2;
        const uint8_t* kb = (const uint8_t*)p.kcache;
        const uint8_t* vb = (const uint8_t*)p.vcache;
        for (size_t o = ((size_t)rank * blockDim.x + threadIdx.x) * 128; o < bytes;
             o += (size_t)LAYER_CLUSTER * blockDim.x * 128) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(kb + o));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(vb + o));
        }
    }
    // Every block of the cluster has started before any writes into another's memory.
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    dependency_wait();
    LAYER_STAMP(1);
    BlockQ8* q8;
    BlockQ8K* q8k;
    float* xs;
    // The 8-lane groups of every phase's rows (see `layer_qkv`).
    const int g = lane >> 3, l = lane & 7;
    if (tail) {
        // Every block's copy of the attention output, where phase B would have left it.
        for (int i = threadIdx.x; i < p.width; i += blockDim.x) att[i] = p.att[i];
        cp_async_wait_all();
        __syncthreads();
        asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    } else {
        // A. Q/K/V with RoPE and the cache write.
        {
            PrologueParams in = {p.x, nullptr, p.attn_norm, p.width, p.eps, 0, 1, 0, 0};
            prologue(in, pro, &q8, &q8k, &xs);
        }
        LAYER_STAMP(3);
        cp_async_wait_all();
        __syncthreads();
        asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
        const uint32_t pos = p.state->pos;
        LAYER_STAMP(2);
        const int kv_dim = p.n_kv * p.head_dim;
        const int il = p.form & ROPE_INTERLEAVED;
        layer_qkv(p, p.m, sl, wsl, q8, p.kcache, p.vcache, qv, nullptr, pos, warp, g, l);
        LAYER_STAMP(4);
        cluster_sync();
        LAYER_STAMP(5);
        // B. Attention, one block per head (`attention_fused`'s `attend` on the same values).
        const int len = (int)pos + 1;
        const int group = p.n_head / p.n_kv;
        for (int h = (int)rank; h < p.n_head; h += LAYER_CLUSTER) {
            const int kvh = h / group;
            attend(qv + h * p.head_dim, p.kcache + kvh * p.head_dim, p.vcache + kvh * p.head_dim,
                   kv_dim, p.head_dim, len, p.scale, false, il, xs);
            __syncthreads();
            for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
                const float v = xs[d];
#pragma unroll
                for (uint32_t r = 0; r < LAYER_CLUSTER; ++r)
                    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(cluster_addr(&att[h * p.head_dim + d], r)),
                                 "f"(v) : "memory");
            }
            __syncthreads();
        }
        LAYER_STAMP(6);
        cluster_sync();
    }  // phases A and B
    LAYER_STAMP(7);
    // C. The output projection and the residual.
    {
        PrologueParams in = {att, nullptr, nullptr, p.width, p.eps, 0, 1, 0, 0};
        prologue(in, pro, &q8, &q8k, &xs);
    }
    LAYER_STAMP(8);
    for (int k0 = warp * 4; k0 < sl.n_o; k0 += FUSE_WARPS * 4) {
        const int k = min(k0 + g, sl.n_o - 1), r = sl.o0 + k, type = p.m[LM_O].type;
        const uint8_t* w[1] = {wsl + sl.off_o + k * p.m[LM_O].row_bytes};
        float acc[1], ext[1];
        q32_lane<1>(type, w, p.width, q8, l, acc, ext);
        const float dot = group_finish(type, acc[0], ext[0]);
        if (k0 + g < sl.n_o) st_cluster_group(&x1[r], __fadd_rn(p.x[r], dot), l);
    }
    LAYER_STAMP(9);
    cluster_sync();
    LAYER_STAMP(10);
    // D. The FFN norm, gate and up, and their SwiGLU product.
    {
        PrologueParams in = {x1, nullptr, p.ffn_norm, p.width, p.eps, 0, 1, 0, 0};
        prologue(in, pro, &q8, &q8k, &xs);
    }
    LAYER_STAMP(11);
    const int tg = p.m[LM_GATE].type, tu = p.m[LM_UP].type;
    for (int k0 = warp * 4; k0 < sl.n_f; k0 += FUSE_WARPS * 4) {
        const int k = min(k0 + g, sl.n_f - 1), r = sl.f0 + k;
        const uint8_t* w[2] = {wsl + sl.off_gate + k * p.m[LM_GATE].row_bytes,
                               wsl + sl.off_up + k * p.m[LM_UP].row_bytes};
        float acc[2], ext[2];
        if (tg == tu) {
            q32_lane<2>(tg, w, p.width, q8, l, acc, ext);
        } else {
            q32_lane<1>(tg, w, p.width, q8, l, acc, ext);
            q32_lane<1>(tu, w + 1, p.width, q8, l, acc + 1, ext + 1);
        }
        const float gv = group_finish(tg, acc[0], ext[0]), uv = group_finish(tu, acc[1], ext[1]);
        if (k0 + g < sl.n_f) st_cluster_group(&hbuf[r], silu_mul(gv, uv), l);
    }
    LAYER_STAMP(12);
    cluster_sync();
    LAYER_STAMP(13);
    // E. The down projection and the residual.
    {
        PrologueParams in = {hbuf, nullptr, nullptr, p.ffn, p.eps, 0, 1, 0, 0};
        prologue(in, pro, &q8, &q8k, &xs);
    }
    LAYER_STAMP(14);
    for (int k0 = warp * 4; k0 < sl.n_d; k0 += FUSE_WARPS * 4) {
        const int k = min(k0 + g, sl.n_d - 1), r = sl.d0 + k, type = p.m[LM_DOWN].type;
        const uint8_t* w[1] = {wsl + sl.off_down + k * p.m[LM_DOWN].row_bytes};
        float acc[1], ext[1];
        q32_lane<1>(type, w, p.ffn, q8, l, acc, ext);
        const float dot = group_finish(type, acc[0], ext[0]);
        if (k0 + g < sl.n_d) {
            const float v = __fadd_rn(x1[r], dot);
            if (l == 0) p.x[r] = v;
            // Paired: the new residual into every block's `qv` for the next layer's phase A.
            if (pair) st_cluster_group(&qv[r], v, l);
        }
    }
    LAYER_STAMP(15);
    if (pair) {
        // A of the next layer: its attention norm and Q/K/V with RoPE and the cache write, Q
        // into global memory for the next launch (`attention_cluster`).
        cluster_sync();
        {
            PrologueParams in = {qv, nullptr, p.next_norm, p.width, p.eps, 0, 1, 0, 0};
            prologue(in, pro, &q8, &q8k, &xs);
        }
        layer_qkv(p, p.next_m, sl, wsl, q8, p.next_k, p.next_v, nullptr, p.q_out, p.state->pos, warp, g, l);
    }
#else
    __trap();  // launched only on compute capability 9.0 and later
#endif
}

// ---------------------------------------------------------------------------------------
// layers_grid: every merged layer of the decode step in one launch of one block per SM
// (compute capability 9.0 and later; the same phases, rows and arithmetic as `layer`, so the
// same values). Where `layer` gives a layer 16 SMs and hands values on through distributed
// shared memory and cluster barriers, this kernel gives every layer all the grid's blocks:
// block b of nb takes rows [b * ceil(n / nb), ...) of each phase (`grid_slice(p, b, nb)`)
// and hands its values on through global memory, each value tagged with the launch: a
// 64-bit word (value bits low, tag high) stored at once, so a reader that sees this
// launch's tag sees the value. There is no barrier: a block reads a phase's input by
// spinning on each word until its tag is this launch's (`xch_read`), one L2 round trip
// after the last writer. Every (layer, phase) has its own words (`grid_xch`), written once
// a launch, so no block overwrites what a slower one has still to read. The tag is the
// number of launches before this one plus one: each block counts its own launches
// (`GridParams::seq[b]`, read at its start, written at its end), so all agree.
//
// The cache row of the step's position: the attention block of head h reads the K and V
// values of its KV head from phase A's words and writes them into the cache itself (the
// group's blocks write the same bytes), so it reads the whole span from its own writes and
// earlier launches'. Where the span fits `stage_rows`, that block first copies its KV head's
// rows of the earlier positions into shared memory (`cp.async`, while phase A runs) and
// attends from there. The blocks' weight slices stream through a ring of GRID_RING slots in
// shared memory (one bulk copy a region, completing on the slot's mbarrier), GRID_RING - 1
// layers ahead of the one computed.
//
// Every block must be resident at once (a reader spins until its writers have run): the
// host launches one block per SM as a cooperative launch (the driver starts all blocks at
// once or refuses), a block with no rows and no head returns at once, and
// `griddepcontrol.launch_dependents` comes at the last layer, when every block has run (with
// one layer, implicitly at the kernel's end).
// ---------------------------------------------------------------------------------------
#define GRID_RING 4

struct GridParams {
    const LayerParams* layers;   // [n_layers], device memory, constant
    unsigned long long* xch;     // [n_layers][xch_words] tagged words, zero at load
    unsigned int* seq;           // [nb] launches each block completed (zero at load)
    int n_layers;
    int slot_bytes;              // one ring slot: the largest slice of any block and layer
    int xch_words;               // words a layer: q_dim + 2 kv_dim + 3 width + ffn
    int stage_rows;              // cache rows of a head the attention blocks stage in shared
                                 // memory (K then V, f16, after the SwiGLU product's area)
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// A layer's words: Q (rotated, f32) [q_dim], K (rotated, f16 bits, the cache row's order)
// [kv_dim], V (f16 bits) [kv_dim], the attention output [width], x1 [width], the SwiGLU
// product [ffn], the residual out [width].
struct GridXch {
    unsigned long long *q, *k, *v, *att, *x1, *h, *x;
};

__device__ __forceinline__ GridXch grid_xch(const GridParams& gp, const LayerParams& p, int L) {
    const int q_dim = p.n_head * p.head_dim, kv_dim = p.n_kv * p.head_dim;
    GridXch x;
    x.q = gp.xch + (size_t)L * gp.xch_words;
    x.k = x.q + q_dim;
    x.v = x.k + kv_dim;
    x.att = x.v + kv_dim;
    x.x1 = x.att + p.width;
    x.h = x.x1 + p.width;
    x.x = x.h + p.ffn;
    return x;
}

__device__ __forceinline__ void xch_put(unsigned long long* w, uint32_t bits, uint32_t tag) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(w),
                 "l"(((unsigned long long)tag << 32) | bits) : "memory");
}

// The value bits of the word at `w`, read again until its tag is `tag`.
__device__ __forceinline__ uint32_t xch_get(const unsigned long long* w, uint32_t tag) {
    unsigned long long v;
    for (;;) {
        asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(w) : "memory");
        if ((uint32_t)(v >> 32) == tag) return (uint32_t)v;
    }
}

// Block-wide: n words of `src` into dst (their value bits). All threads call it; dst is
// complete on return.
__device__ void xch_read(const unsigned long long* src, int n, uint32_t tag, uint32_t* dst) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = xch_get(src + i, tag);
    __syncthreads();
}

// Block b of nb's slice of layer p in a ring slot (mirrored by `SliceShape::grid_bytes` in
// src/gpu/kernels.rs): `layer_slice`'s rows, each region (an item's row, the output rows,
// the gate, up and down rows) copied as one bulk copy of the 16-byte-aligned bytes around
// it, so each region takes align16(its rows' bytes) + 32 (the copy needs at most + 16) and
// its rows start `grid_shift` bytes in. (Each weight region starts 256-byte aligned and the
// next one, or the arena's rounded end, at the next multiple of 256: the aligned bytes
// around a matrix's rows lie in its allocation.)
__device__ LayerSlice grid_slice(const LayerParams& p, int b, int nb) {
    LayerSlice s = layer_slice(p, b, nb);
    const int widest = max(p.m[LM_Q].row_bytes, max(p.m[LM_K].row_bytes, p.m[LM_V].row_bytes));
    s.item_stride = 2 * (align16(widest) + 32);
    s.off_item = 0;
    s.off_o = s.n_items * s.item_stride;
    s.off_gate = s.off_o + align16(s.n_o * p.m[LM_O].row_bytes) + 32;
    s.off_up = s.off_gate + align16(s.n_f * p.m[LM_GATE].row_bytes) + 32;
    s.off_down = s.off_up + align16(s.n_f * p.m[LM_UP].row_bytes) + 32;
    s.bytes = s.off_down + align16(s.n_d * p.m[LM_DOWN].row_bytes) + 32;
    return s;
}

// Where the bytes at global address `g` lie after their region's bulk copy: this far past
// the region's start.
__device__ __forceinline__ int grid_shift(const uint8_t* g) { return (int)((size_t)g & 15); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// One region: the 16-byte-aligned bytes around [g, g + bytes) into dst (16-byte aligned),
// completing on `bar`; returns the bytes copied.
__device__ __forceinline__ uint32_t grid_bulk(uint8_t* dst, const uint8_t* g, int bytes, unsigned long long* bar) {
    if (bytes <= 0) return 0;
    const size_t a = (size_t)g & ~(size_t)15, e = ((size_t)g + bytes + 15) & ~(size_t)15;
    const uint32_t n = (uint32_t)(e - a);
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
        "l"(a), "r"(n), "r"(smem_u32(bar))
        : "memory");
    return n;
}

// Block b's slice of layer p into ring slot `dst` (one thread; completes on `bar`).
__device__ void grid_slice_load(const LayerParams& p, const LayerSlice& sl, uint8_t* dst, unsigned long long* bar) {
    // The bytes first (expect_tx), then the copies.
    uint32_t total = 0;
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(total)
                         : "memory");
        uint32_t n = 0;
        for (int k = 0; k < sl.n_items; ++k) {
            int ra, rb, h, i;
            const LayerMat& m = p.m[layer_item(p, sl.item0 + k, &ra, &rb, &h, &i)];
            uint8_t* d = dst + sl.off_item + k * sl.item_stride;
            const uint8_t *ga = m.w + (size_t)ra * m.row_bytes, *gb = m.w + (size_t)rb * m.row_bytes;
            if (pass == 0) {
                n += (uint32_t)((((size_t)ga + m.row_bytes + 15) & ~(size_t)15) - ((size_t)ga & ~(size_t)15));
                n += (uint32_t)((((size_t)gb + m.row_bytes + 15) & ~(size_t)15) - ((size_t)gb & ~(size_t)15));
            } else {
                n += grid_bulk(d, ga, m.row_bytes, bar);
                n += grid_bulk(d + sl.item_stride / 2, gb, m.row_bytes, bar);
            }
        }
        const uint8_t* g[4] = {p.m[LM_O].w + (size_t)sl.o0 * p.m[LM_O].row_bytes,
                               p.m[LM_GATE].w + (size_t)sl.f0 * p.m[LM_GATE].row_bytes,
                               p.m[LM_UP].w + (size_t)sl.f0 * p.m[LM_UP].row_bytes,
                               p.m[LM_DOWN].w + (size_t)sl.d0 * p.m[LM_DOWN].row_bytes};
        const int len[4] = {sl.n_o * p.m[LM_O].row_bytes, sl.n_f * p.m[LM_GATE].row_bytes,
                            sl.n_f * p.m[LM_UP].row_bytes, sl.n_d * p.m[LM_DOWN].row_bytes};
        const int off[4] = {sl.off_o, sl.off_gate, sl.off_up, sl.off_down};
        for (int r = 0; r < 4; ++r) {
            if (len[r] <= 0) continue;
            if (pass == 0)
                n += (uint32_t)((((size_t)g[r] + len[r] + 15) & ~(size_t)15) - ((size_t)g[r] & ~(size_t)15));
            else
                n += grid_bulk(dst + off[r], g[r], len[r], bar);
        }
        total = n;
    }
}

// Wait until the copies completing on `bar` in its phase `parity` have landed.
__device__ __forceinline__ void grid_bar_wait(unsigned long long* bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(smem_u32(bar)), "r"(parity)
            : "memory");
    } while (!done);
}
#endif

extern "C" __global__ void __launch_bounds__(FUSE_WARPS * 32, 1) layers_grid(GridParams gp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ LayerParams P;
    __shared__ uint32_t tag_s;
    __shared__ __align__(8) unsigned long long bars[GRID_RING];  // a ring slot's copies landed
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int nb = (int)gridDim.x, b = (int)blockIdx.x;
    const LayerParams& p0 = gp.layers[0];
    {
        // A block with no rows in any phase and no head has nothing to hand on.
        const LayerSlice s0 = layer_slice(p0, b, nb);
        if (s0.n_items == 0 && s0.n_o == 0 && s0.n_f == 0 && s0.n_d == 0 && b >= p0.n_head) return;
    }
    uint8_t* ring = smem;
    unsigned char* pro = smem + GRID_RING * gp.slot_bytes;
    const int widest = max(p0.width, p0.ffn);
    // Beside the prologue's area: the residual, the attention output, x1, the SwiGLU product.
    float* xr = (float*)(pro + align16(widest / QK * (int)sizeof(BlockQ8)) + align16(widest * 4));
    float* att = xr + p0.n_head * p0.head_dim;
    float* x1 = att + p0.width;
    float* hbuf = x1 + p0.width;
    uint16_t* ks = (uint16_t*)(hbuf + align16(p0.ffn));
    uint16_t* vs = ks + (size_t)gp.stage_rows * p0.head_dim;
    // The first GRID_RING layers' slices before the wait (the weights are constant).
    if (threadIdx.x == 0) {
        for (int k = 0; k < GRID_RING; ++k)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bars[k])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int k = 0; k < GRID_RING && k < gp.n_layers; ++k) {
            const LayerParams& pk = gp.layers[k];
            grid_slice_load(pk, grid_slice(pk, b, nb), ring + k * gp.slot_bytes, &bars[k]);
        }
    }
    dependency_wait();
    if (threadIdx.x == 0) {
        uint32_t s;
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(s) : "l"(gp.seq + b) : "memory");
        tag_s = s + 1;
    }
    BlockQ8* q8;
    BlockQ8K* q8k;
    float* xs;
    const int g = lane >> 3, l = lane & 7;
    for (int L = 0; L < gp.n_layers; ++L) {
        if (threadIdx.x < (int)(sizeof(LayerParams) / 4))
            ((int*)&P)[threadIdx.x] = ((const int*)(gp.layers + L))[threadIdx.x];
        __syncthreads();
        const uint32_t tag = tag_s;
        if (L == gp.n_layers - 1 && L > 0) dependents_launch();
        const LayerParams& p = P;
        const LayerSlice sl = grid_slice(p, b, nb);
        const GridXch xc = grid_xch(gp, p, L);
        const uint8_t* wsl = ring + (L % GRID_RING) * gp.slot_bytes;
        // The attention block's cache rows before this position (earlier launches wrote
        // them) into shared memory while phase A runs, where they fit (one head a block).
        const uint32_t pos = p.state->pos;
        const bool stage = nb >= p.n_head && b < p.n_head && (int)pos < gp.stage_rows;
        if (stage) {
            const int kvh = b / (p.n_head / p.n_kv), kv_dim = p.n_kv * p.head_dim, c = p.head_dim / 8;
            for (int t = threadIdx.x; t < (int)pos * c; t += blockDim.x) {
                const int j = t / c, o = (t % c) * 8;
                const size_t gofs = (size_t)j * kv_dim + kvh * p.head_dim + o;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(ks + j * p.head_dim + o)),
                             "l"(p.kcache + gofs) : "memory");
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(vs + j * p.head_dim + o)),
                             "l"(p.vcache + gofs) : "memory");
            }
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
        const int so = grid_shift(p.m[LM_O].w + (size_t)sl.o0 * p.m[LM_O].row_bytes);
        const int sg = grid_shift(p.m[LM_GATE].w + (size_t)sl.f0 * p.m[LM_GATE].row_bytes);
        const int su = grid_shift(p.m[LM_UP].w + (size_t)sl.f0 * p.m[LM_UP].row_bytes);
        const int sd = grid_shift(p.m[LM_DOWN].w + (size_t)sl.d0 * p.m[LM_DOWN].row_bytes);
        // A. The residual (the previous layer's words; layer 0: the residual buffer, written
        // by the kernel before this one), Q/K/V with RoPE.
        if (L == 0) {
            for (int i = threadIdx.x; i < p.width; i += blockDim.x) xr[i] = p.x[i];
            __syncthreads();
        } else {
            xch_read(grid_xch(gp, p, L - 1).x, p.width, tag, (uint32_t*)xr);
        }
        {
            PrologueParams in = {xr, nullptr, p.attn_norm, p.width, p.eps, 0, 1, 0, 0};
            prologue(in, pro, &q8, &q8k, &xs);
        }
        grid_bar_wait(&bars[L % GRID_RING], (uint32_t)(L / GRID_RING) & 1u);
        const int half = p.head_dim / 2, kv_dim = p.n_kv * p.head_dim;
        const float* ang = p.angles + (size_t)pos * p.head_dim;
        const int il = p.form & ROPE_INTERLEAVED;
        for (int k0 = warp * 4; k0 < sl.n_items; k0 += FUSE_WARPS * 4) {
            const bool on = k0 + g < sl.n_items;
            const int k = min(k0 + g, sl.n_items - 1);
            int ra, rb, h, i;
            const int which = layer_item(p, sl.item0 + k, &ra, &rb, &h, &i);
            const LayerMat& m = p.m[which];
            const uint8_t* row = wsl + sl.off_item + k * sl.item_stride;
            const uint8_t* w[2] = {row + grid_shift(m.w + (size_t)ra * m.row_bytes),
                                   row + sl.item_stride / 2 + grid_shift(m.w + (size_t)rb * m.row_bytes)};
            float acc[2], ext[2];
            q32_lane<2>(m.type, w, p.width, q8, l, acc, ext);
            const float a = group_finish(m.type, acc[0], ext[0]), bv = group_finish(m.type, acc[1], ext[1]);
            if (!on || l != 0) continue;
            if (which == LM_V) {
                xch_put(xc.v + ra, f2h(a), tag);
                xch_put(xc.v + rb, f2h(bv), tag);
            } else {
                float na, nb2;
                rope_pair(a, bv, ang[i], ang[half + i], p.form & ROPE_FUSED, &na, &nb2);
                if (which == LM_Q) {
                    xch_put(xc.q + ra, __float_as_uint(na), tag);
                    xch_put(xc.q + rb, __float_as_uint(nb2), tag);
                } else {
                    const int at = h * p.head_dim;
                    xch_put(xc.k + at + lane_slot(i, half, il), f2h(na), tag);
                    xch_put(xc.k + at + lane_slot(i + half, half, il), f2h(nb2), tag);
                }
            }
        }
        // B. Attention, one block per head: its KV head's row of this position into the
        // cache (the group's blocks write the same bytes), then `attend` over the span.
        const int len = (int)pos + 1;
        const int group = p.n_head / p.n_kv;
        for (int h = b; h < p.n_head; h += nb) {
            const int kvh = h / group;
            // In the areas of the attention output, x1 and the SwiGLU product (free until C;
            // the host checks 3 * head_dim <= 2 * width + ffn).
            uint32_t* qkv = (uint32_t*)att;
            const size_t row = (size_t)pos * kv_dim + kvh * p.head_dim;
            // Q, K and V of the head, all in flight at once.
            for (int i = threadIdx.x; i < 3 * p.head_dim; i += blockDim.x) {
                const int part = i / p.head_dim, d = i % p.head_dim;
                const unsigned long long* w = part == 0 ? xc.q + h * p.head_dim + d
                                              : part == 1 ? xc.k + kvh * p.head_dim + d
                                                          : xc.v + kvh * p.head_dim + d;
                const uint32_t v = xch_get(w, tag);
                qkv[i] = v;
                if (part == 1) {
                    p.kcache[row + d] = (uint16_t)v;
                    if (stage) ks[(size_t)pos * p.head_dim + d] = (uint16_t)v;
                }
                if (part == 2) {
                    p.vcache[row + d] = (uint16_t)v;
                    if (stage) vs[(size_t)pos * p.head_dim + d] = (uint16_t)v;
                }
            }
            if (stage) asm volatile("cp.async.wait_all;" ::: "memory");
            __syncthreads();
            if (stage)
                attend((const float*)qkv, ks, vs, p.head_dim, p.head_dim, len, p.scale, false, il, xs);
            else
                attend((const float*)qkv, p.kcache + kvh * p.head_dim, p.vcache + kvh * p.head_dim,
                       kv_dim, p.head_dim, len, p.scale, false, il, xs);
            __syncthreads();
            for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x)
                xch_put(xc.att + h * p.head_dim + d, __float_as_uint(xs[d]), tag);
            __syncthreads();
        }
        // C. The output projection and the residual.
        xch_read(xc.att, p.width, tag, (uint32_t*)att);
        {
            PrologueParams in = {att, nullptr, nullptr, p.width, p.eps, 0, 1, 0, 0};
            prologue(in, pro, &q8, &q8k, &xs);
        }
        for (int k0 = warp * 4; k0 < sl.n_o; k0 += FUSE_WARPS * 4) {
            const int k = min(k0 + g, sl.n_o - 1), r = sl.o0 + k, type = p.m[LM_O].type;
            const uint8_t* w[1] = {wsl + sl.off_o + so + k * p.m[LM_O].row_bytes};
            float acc[1], ext[1];
            q32_lane<1>(type, w, p.width, q8, l, acc, ext);
            const float dot = group_finish(type, acc[0], ext[0]);
            if (k0 + g < sl.n_o && l == 0) xch_put(xc.x1 + r, __float_as_uint(__fadd_rn(xr[r], dot)), tag);
        }
        // D. The FFN norm, gate and up, and their SwiGLU product.
        xch_read(xc.x1, p.width, tag, (uint32_t*)x1);
        {
            PrologueParams in = {x1, nullptr, p.ffn_norm, p.width, p.eps, 0, 1, 0, 0};
            prologue(in, pro, &q8, &q8k, &xs);
        }
        const int tg = p.m[LM_GATE].type, tu = p.m[LM_UP].type;
        for (int k0 = warp * 4; k0 < sl.n_f; k0 += FUSE_WARPS * 4) {
            const int k = min(k0 + g, sl.n_f - 1), r = sl.f0 + k;
            const uint8_t* w[2] = {wsl + sl.off_gate + sg + k * p.m[LM_GATE].row_bytes,
                                   wsl + sl.off_up + su + k * p.m[LM_UP].row_bytes};
            float acc[2], ext[2];
            if (tg == tu) {
                q32_lane<2>(tg, w, p.width, q8, l, acc, ext);
            } else {
                q32_lane<1>(tg, w, p.width, q8, l, acc, ext);
                q32_lane<1>(tu, w + 1, p.width, q8, l, acc + 1, ext + 1);
            }
            const float gv = group_finish(tg, acc[0], ext[0]), uv = group_finish(tu, acc[1], ext[1]);
            if (k0 + g < sl.n_f && l == 0) xch_put(xc.h + r, __float_as_uint(silu_mul(gv, uv)), tag);
        }
        // E. The down projection and the residual: into the next layer's words, and after
        // the last layer into the residual buffer (the head reads it after this kernel).
        xch_read(xc.h, p.ffn, tag, (uint32_t*)hbuf);
        {
            PrologueParams in = {hbuf, nullptr, nullptr, p.ffn, p.eps, 0, 1, 0, 0};
            prologue(in, pro, &q8, &q8k, &xs);
        }
        const bool last = L + 1 == gp.n_layers;
        for (int k0 = warp * 4; k0 < sl.n_d; k0 += FUSE_WARPS * 4) {
            const int k = min(k0 + g, sl.n_d - 1), r = sl.d0 + k, type = p.m[LM_DOWN].type;
            const uint8_t* w[1] = {wsl + sl.off_down + sd + k * p.m[LM_DOWN].row_bytes};
            float acc[1], ext[1];
            q32_lane<1>(type, w, p.ffn, q8, l, acc, ext);
            const float dot = group_finish(type, acc[0], ext[0]);
            if (k0 + g < sl.n_d && l == 0) {
                const float v = __fadd_rn(x1[r], dot);
                if (last) p.x[r] = v;
                else xch_put(xc.x + r, __float_as_uint(v), tag);
            }
        }
        // This slot's rows are read: the slice GRID_RING layers on into it (the generic
        // proxy's reads ordered before the bulk copies' writes).
        __syncthreads();
        if (threadIdx.x == 0 && L + GRID_RING < gp.n_layers) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            const LayerParams& pn = gp.layers[L + GRID_RING];
            grid_slice_load(pn, grid_slice(pn, b, nb), ring + (L % GRID_RING) * gp.slot_bytes,
                            &bars[L % GRID_RING]);
        }
    }
    if (threadIdx.x == 0) gp.seq[b] = tag_s;
#else
    __trap();  // launched only on compute capability 9.0 and later
#endif
}

// ---------------------------------------------------------------------------------------
// sample_advance: the next token of the request into state.token and seq[pos + 1], then
// state.pos += 1. One block of SAMPLE_THREADS; the last kernel of a step. While the step is
// inside the prompt (pos + 1 < prompt_len) it only advances the position.
//
// The chain is src/sample.rs's, value for value (its module docs are the definition):
//  1. repetition penalty over seq[pos + 1 - w ..= pos], w = min(window, pos + 1), each
//     distinct in-vocabulary token once (a bitmap of the vocabulary in shared memory),
//     logit / penalty when > 0 else logit * penalty, in place in `logits`;
//  2. greedy (config.greedy): largest logit, lowest id on a tie, NaN never wins;
//  3.-5. top-k, top-p, min-p: each keeps a prefix of the order (logit descending in IEEE
//     total order, i.e. Rust's f32::total_cmp, then id ascending), so the survivors are the
//     elements whose 64-bit rank key (order key << 32 | ~id) is at least a threshold.
//     Top-k up to SAMPLE_POOL / 2: the elements of rank at least a bound that the whole
//     top k passes (`topk_bound`: one pass over the logits, the k-th largest of 64 or
//     1,024 of the threads' maxima) gathered and sorted and the first k kept, when no more
//     than SAMPLE_POOL pass; else top-k's threshold is found by a radix select on the
//     32-bit order key (4 passes of
//     256-bin counts) and the tie resolved by id. When at most SAMPLE_POOL tokens survive
//     top-k (top-k <= 1024, or a vocabulary of <= 1024), they are copied to shared memory
//     in id order and the rest runs exactly as the CPU code: the same sums in the same
//     order (one thread), sorted by the same total order (bitonic sort). Otherwise top-p's
//     threshold is found by a radix select on the probability mass, the masses summed in
//     fixed point (exp(l - max) * 2^40, 64-bit integers: the same sums in any order, so the
//     same result on every run) and min-p is a predicate (logit >= max + ln(min_p));
//  6.-7. temperature and the draw: u from Philox4x32-10 keyed by the seed, counter (step,
//     request), step = pos + 1 - prompt_len; survivors walked in ascending id accumulating
//     exp(logit / T - max / T) until the running sum exceeds u * total. Up to SAMPLE_POOL
//     survivors: one thread, the CPU's order; more: per-thread chunks of consecutive ids,
//     chunk sums added in chunk order.
// Determinism: only integer atomics; every float sum has a fixed order. Differences from
// the CPU: expf (CUDA, <= 2 ulp) against Rust's f32::exp, and for large survivor sets the
// fixed-point top-p mass and the chunked draw sums; each can move a boundary decision only
// when it is within a few ulp (see tests/gpu_sample.rs).
// ---------------------------------------------------------------------------------------
#define SAMPLE_THREADS 1024
#define SAMPLE_POOL 1024
#define SAMPLE_MAX_VOCAB 262144
#define SAMPLE_FX_ONE 1099511627776.0f  // 2^40: fixed-point unit of the top-p masses

// Per request, written by the host at the request's start (mirrors `SampleConfig` in
// src/gpu/kernels.rs).
struct SampleConfig {
    float inv_temp;       // 1 / temperature, computed on the host in f32 (sample.rs `inv_t`)
    uint32_t greedy;      // temperature <= 0
    uint32_t top_k;       // 0 or >= n: off
    float top_p;          // 1: off
    float min_p;          // 0: off
    float ln_min_p;       // ln(min_p), computed on the host (sample.rs `p.min_p.ln()`)
    float penalty;        // repetition penalty
    uint32_t window;      // penalty window in tokens; 0: no penalty
    uint32_t seed_lo, seed_hi, request_lo, request_hi;
    uint32_t pad[4];
};

struct SampleParams {
    float* logits;              // [n], penalised in place
    uint32_t* seq;              // [seq_cap]: the prompt, then each chosen token at pos + 1
    DecodeState* state;
    const SampleConfig* config;
    int n;
    int seq_cap;
};

// Philox4x32-10 (Salmon et al. 2011; src/sample.rs philox4x32_10).
__device__ void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        const unsigned long long p0 = (unsigned long long)0xD2511F53u * c[0];
        const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c[2];
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
    }
}

// The order of Rust's f32::total_cmp as an unsigned key (larger key = larger float).
__device__ __forceinline__ uint32_t order_key(float f) {
    const uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Rank key: larger = earlier in sample.rs's `by_logit_desc` (logit descending, id ascending).
__device__ __forceinline__ unsigned long long rank_of(uint32_t key, uint32_t id) {
    return ((unsigned long long)key << 32) | (unsigned long long)(0xFFFFFFFFu - id);
}

__device__ __forceinline__ float rank_logit(unsigned long long r) {
    return key_value((uint32_t)(r >> 32));
}

__device__ __forceinline__ uint32_t rank_id(unsigned long long r) {
    return 0xFFFFFFFFu - (uint32_t)(r & 0xFFFFFFFFull);
}

// exp(l - mx) in fixed point (2^40 = 1); 0 for NaN.
__device__ __forceinline__ unsigned long long mass_fx(float l, float mx) {
    const float w = __fmul_rn(expf(__fsub_rn(l, mx)), SAMPLE_FX_ONE);
    return w > 0.0f ? __float2ull_rz(w) : 0ull;
}

// Block-wide helpers: every thread calls them; `red` holds SAMPLE_THREADS u64. Each warp
// reduces or scans its 32 values by shuffles, then warp 0 the 32 warps' (SAMPLE_THREADS is
// 32 warps): integer sums are exact and fmaxf's largest value is the same in any order.
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)
#define FULL_MASK 0xffffffffu
// Loads a thread issues before it uses them in the passes over the logits (16 of the 48 a
// thread reads over 49,152 logits), so a pass waits for about 3 round trips, not 48.
#define SAMPLE_UNROLL 16

// One turn of a pass: v[u] = logits[i0 + stride * u] where that is below `end`, else `fill`
// (the loads issued together, used after).
__device__ __forceinline__ void load_turn(const float* logits, int i0, int stride, int end,
                                          float fill, float (&v)[SAMPLE_UNROLL]) {
#pragma unroll
    for (int u = 0; u < SAMPLE_UNROLL; ++u) {
        const int i = i0 + stride * u;
        v[u] = i < end ? logits[i] : fill;
    }
}
__device__ unsigned long long block_sum_u64(unsigned long long v, unsigned long long* red) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    if (lane == 0) red[w] = v;
    __syncthreads();
    if (w == 0) {
        unsigned long long x = lane < SAMPLE_WARPS ? red[lane] : 0ull;
        for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(FULL_MASK, x, o);
        if (lane == 0) red[32] = x;
    }
    __syncthreads();
    const unsigned long long r = red[32];
    __syncthreads();
    return r;
}

// Largest value, NaN ignored (fmaxf), as f32::max folds.
__device__ float block_max(float v, unsigned long long* red) {
    float* a = (float*)red;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) a[w] = v;
    __syncthreads();
    if (w == 0) {
        const float x = warp_max(lane < SAMPLE_WARPS ? a[lane] : NEG_INF);
        if (lane == 0) a[32] = x;
    }
    __syncthreads();
    const float r = a[32];
    __syncthreads();
    return r;
}

// Exclusive prefix sum over the threads (in thread order); *total gets the sum.
__device__ uint32_t block_scan(uint32_t v, unsigned long long* red, uint32_t* total) {
    uint32_t* a = (uint32_t*)red;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    uint32_t x = v;  // inclusive within the warp
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) a[w] = x;
    __syncthreads();
    if (w == 0) {
        uint32_t s = lane < SAMPLE_WARPS ? a[lane] : 0u;  // inclusive over the warps
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t y = __shfl_up_sync(FULL_MASK, s, o);
            if (lane >= o) s += y;
        }
        a[32 + lane] = s;
    }
    __syncthreads();
    const uint32_t before = w > 0 ? a[32 + w - 1] : 0u;
    *total = a[63];
    __syncthreads();
    return before + x - v;
}

__device__ __forceinline__ unsigned long long sort_key(unsigned long long x, int by_id) {
    return by_id ? (x & 0xFFFFFFFFull) : x;
}

// Sorts the rank keys pool[0, live) descending (by the whole key, or by its low 32 bits: id
// ascending); the entries from `live` to the end of the span sorted (64, or the next power
// of two) are zeros (dead, last by either key), later ones untouched. Live keys differ (by
// id), so every sort gives the same order. Up to 64: warp 0 alone, two keys a lane, by
// shuffles; else a block-wide bitonic sort. Called after a __syncthreads; syncs at the end.
__device__ void pool_sort_desc(unsigned long long* a, int by_id, uint32_t live = SAMPLE_POOL) {
    const int t = threadIdx.x;
    if (live <= 64) {
        if (t < 32) {
            unsigned long long v[2] = {a[t], a[t + 32]};  // elements t and t + 32
            for (int k = 2; k <= 64; k <<= 1) {
                for (int j = k >> 1; j > 0; j >>= 1) {
                    if (j == 32) {  // k == 64: the pair is a lane's own, descending
                        if (sort_key(v[0], by_id) < sort_key(v[1], by_id)) {
                            const unsigned long long x = v[0];
                            v[0] = v[1];
                            v[1] = x;
                        }
                        continue;
                    }
                    for (int r = 0; r < 2; ++r) {
                        const int e = r * 32 + t;
                        const unsigned long long o = __shfl_xor_sync(FULL_MASK, v[r], j);
                        const bool first = (e & j) == 0, desc = (e & k) == 0;
                        const bool mine_big = sort_key(v[r], by_id) > sort_key(o, by_id);
                        // The first of the pair keeps the larger when descending.
                        if (first == desc ? !mine_big : mine_big) v[r] = o;
                    }
                }
            }
            a[t] = v[0];
            a[t + 32] = v[1];
        }
        __syncthreads();
        return;
    }
    int span = 128;
    while (span < (int)live) span <<= 1;
    for (int k = 2; k <= span; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            const int o = t ^ j;
            if (o > t && o < span) {
                const unsigned long long x = a[t], y = a[o];
                const unsigned long long kx = sort_key(x, by_id), ky = sort_key(y, by_id);
                const bool desc = (t & k) == 0;
                if (desc ? kx < ky : kx > ky) { a[t] = y; a[o] = x; }
            }
            __syncthreads();
        }
    }
}

struct SampleShared {
    unsigned long long raw[SAMPLE_MAX_VOCAB / 64];  // penalty bitmap, then the pool + weights
    unsigned long long red[SAMPLE_THREADS];
    unsigned long long hmass[256];
    uint32_t hcount[256];
    unsigned long long u64v[2];
    uint32_t u32v[4];
    float f32v[2];
};

// Radix select over the elements of rank >= thr, in descending order key: the key at which
// the running count (by_mass = 0, in elements) or fixed-point mass (by_mass = 1, exp(l - mx))
// first reaches `need`. *rest: what is still needed among that key's elements; *ties: how
// many elements have that key.
__device__ uint32_t radix_select(const float* logits, int n, unsigned long long thr, int by_mass,
                                 float mx, unsigned long long need, unsigned long long* rest,
                                 uint32_t* ties, SampleShared& sh) {
    const int t = threadIdx.x;
    uint32_t prefix = 0, mask = 0;
    for (int pass = 0; pass < 4; ++pass) {
        const int shift = 24 - 8 * pass;
        if (t < 256) { sh.hcount[t] = 0; sh.hmass[t] = 0; }
        __syncthreads();
        if (!by_mass) {
            for (int i = t; i < n; i += SAMPLE_THREADS) {
                const uint32_t k = order_key(logits[i]);
                if ((k & mask) != prefix || rank_of(k, (uint32_t)i) < thr) continue;
                atomicAdd(&sh.hcount[(k >> shift) & 255u], 1u);
            }
        } else {
            // By mass, warp-aggregated: the lanes of a warp that fall in one bin add their
            // count and masses (integers: any order gives the same sum) through one lane, so
            // the few bins most logits share do not take a 64-bit atomic from every lane in
            // turn (top-p alone over 151,936 logits: 2.7 -> 0.7 ms). `sh.red` (free here)
            // holds each lane's mass for its bin's leader. The count-only pass keeps one
            // 32-bit atomic per element, which was faster there than `__match_any_sync`.
            for (int i0 = 0; i0 < n; i0 += SAMPLE_THREADS) {
                const int i = i0 + t;
                float l = 0.0f;
                uint32_t b = 256u;  // no bin
                if (i < n) {
                    l = logits[i];
                    const uint32_t k = order_key(l);
                    if ((k & mask) == prefix && rank_of(k, (uint32_t)i) >= thr) b = (k >> shift) & 255u;
                }
                if (__ballot_sync(0xffffffffu, b < 256u) == 0) continue;  // the whole warp
                const unsigned peers = __match_any_sync(0xffffffffu, b);
                sh.red[t] = b < 256u ? mass_fx(l, mx) : 0ull;
                __syncwarp();
                if (b < 256u && (t & 31) == __ffs(peers) - 1) {
                    unsigned long long sum = 0;
                    for (unsigned m = peers; m != 0; m &= m - 1) sum += sh.red[(t & ~31) + __ffs(m) - 1];
                    atomicAdd(&sh.hcount[b], (uint32_t)__popc(peers));
                    atomicAdd(&sh.hmass[b], sum);
                }
                __syncwarp();
            }
        }
        __syncthreads();
        if (t == 0) {
            unsigned long long left = need;
            int sel = -1, last = -1;
            for (int b = 255; b >= 0; --b) {
                if (sh.hcount[b] == 0) continue;
                last = b;
                const unsigned long long v = by_mass ? sh.hmass[b] : (unsigned long long)sh.hcount[b];
                if (left <= v) { sel = b; break; }
                left -= v;
            }
            if (sel < 0) {  // rounding guard: the whole last bin
                sel = last < 0 ? 0 : last;
                left = by_mass ? sh.hmass[sel] : (unsigned long long)sh.hcount[sel];
            }
            sh.u32v[0] = (uint32_t)sel;
            sh.u32v[1] = sh.hcount[sel];
            sh.u64v[0] = left;
        }
        __syncthreads();
        prefix |= sh.u32v[0] << shift;
        mask |= 255u << shift;
        need = sh.u64v[0];
        *ties = sh.u32v[1];
        __syncthreads();
    }
    *rest = need;
    return prefix;
}

// The id of the `need`-th (1-based) element in ascending id among those with order key
// `key` and rank >= thr (threads own consecutive ids).
__device__ uint32_t nth_tie(const float* logits, int n, uint32_t key, unsigned long long thr,
                            uint32_t need, SampleShared& sh) {
    const int t = threadIdx.x;
    const int chunk = (n + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
    const int lo = min(n, t * chunk), hi = min(n, lo + chunk);
    uint32_t c = 0;
    for (int i = lo; i < hi; ++i) {
        const uint32_t k = order_key(logits[i]);
        if (k == key && rank_of(k, (uint32_t)i) >= thr) ++c;
    }
    if (t == 0) sh.u32v[2] = (uint32_t)(n - 1);
    uint32_t total;
    const uint32_t before = block_scan(c, sh.red, &total);
    if (c > 0 && before < need && need <= before + c) {
        uint32_t seen = before;
        for (int i = lo; i < hi; ++i) {
            const uint32_t k = order_key(logits[i]);
            if (k == key && rank_of(k, (uint32_t)i) >= thr && ++seen == need) {
                sh.u32v[2] = (uint32_t)i;
                break;
            }
        }
    }
    __syncthreads();
    const uint32_t r = sh.u32v[2];
    __syncthreads();
    return r;
}

__device__ __forceinline__ bool survives(float l, int i, unsigned long long thr, int minp,
                                         float min_logit) {
    return rank_of(order_key(l), (uint32_t)i) >= thr && (!minp || l >= min_logit);
}

// Bit u set where element i + 32 * u of a gather's turn (values v) is below `end` and
// survives.
__device__ __forceinline__ uint32_t turn_survivors(const float (&v)[SAMPLE_UNROLL], int i, int end,
                                                   unsigned long long thr, int minp,
                                                   float min_logit) {
    uint32_t bits = 0;
#pragma unroll
    for (int u = 0; u < SAMPLE_UNROLL; ++u) {
        const int j = i + 32 * u;
        if (j < end && survives(v[u], j, thr, minp, min_logit)) bits |= 1u << u;
    }
    return bits;
}

// Copies the survivors, in ascending id, into pool[0..m) (m <= SAMPLE_POOL) and zeroes the
// rest of the pool. Returns m; *all gets the survivors' count, which may exceed the pool.
// Warp w takes ids [w * span, (w + 1) * span) (span a multiple of 32), 32 consecutive ids
// a turn: each lane's place is the survivors before it (the warp's, then the lanes' below
// it by ballot), so reads are coalesced and the order is the ids'. The first pass counts
// and keeps each warp's first 32 survivors in its 32 entries of the pool; where no warp has
// more, they move to their places and there is no second pass.
__device__ uint32_t pool_gather(const float* logits, int n, unsigned long long thr, int minp,
                                float min_logit, unsigned long long* pool, SampleShared& sh,
                                uint32_t* all = nullptr) {
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;
    const int span = (n + SAMPLE_THREADS - 1) / SAMPLE_THREADS * 32;
    const int lo = min(n, w * span), hi = min(n, lo + span);
    const unsigned below = (1u << lane) - 1u;
    unsigned long long* own = pool + 32 * w;  // SAMPLE_POOL == SAMPLE_THREADS
    uint32_t c = 0;  // the warp's survivors so far (the same in every lane)
    float v[SAMPLE_UNROLL];
    for (int i0 = lo; i0 < hi; i0 += 32 * SAMPLE_UNROLL) {
        load_turn(logits, i0 + lane, 32, hi, 0.0f, v);
        const uint32_t mine = turn_survivors(v, i0 + lane, hi, thr, minp, min_logit);
        // Most of a warp's turns hold no survivor (a few dozen in 49,152 under top-k's
        // bound): then nothing to place or count, and the ballots are skipped.
        if (!__any_sync(FULL_MASK, mine != 0)) continue;
#pragma unroll
        for (int u = 0; u < SAMPLE_UNROLL; ++u) {
            const int i = i0 + 32 * u + lane;
            const bool keep = (mine >> u) & 1u;
            const unsigned bal = __ballot_sync(FULL_MASK, keep);
            const uint32_t to = c + (uint32_t)__popc(bal & below);
            if (keep && to < 32) own[to] = rank_of(order_key(v[u]), (uint32_t)i);
            c += (uint32_t)__popc(bal);
        }
    }
    uint32_t m;
    uint32_t at = block_scan(lane == 0 ? c : 0u, sh.red, &m);  // the warps' before w
    at = __shfl_sync(FULL_MASK, at, 0);
    if (!__syncthreads_or(c > 32)) {
        // m <= SAMPLE_POOL: every survivor to its place, zeros after them.
        const unsigned long long e = (uint32_t)lane < c ? own[lane] : 0ull;
        __syncthreads();
        if ((uint32_t)t >= m) pool[t] = 0;
        if ((uint32_t)lane < c) pool[at + lane] = e;
    } else {
        pool[t] = 0;
        __syncthreads();
        for (int i0 = lo; i0 < hi && at < SAMPLE_POOL; i0 += 32 * SAMPLE_UNROLL) {
            load_turn(logits, i0 + lane, 32, hi, 0.0f, v);
            const uint32_t mine = turn_survivors(v, i0 + lane, hi, thr, minp, min_logit);
            if (!__any_sync(FULL_MASK, mine != 0)) continue;
#pragma unroll
            for (int u = 0; u < SAMPLE_UNROLL; ++u) {
                const int i = i0 + 32 * u + lane;
                const bool keep = (mine >> u) & 1u;
                const unsigned bal = __ballot_sync(FULL_MASK, keep);
                const uint32_t to = at + (uint32_t)__popc(bal & below);
                if (keep && to < SAMPLE_POOL) pool[to] = rank_of(order_key(v[u]), (uint32_t)i);
                at += (uint32_t)__popc(bal);
            }
        }
    }
    __syncthreads();
    if (all) *all = m;
    return m < SAMPLE_POOL ? m : SAMPLE_POOL;
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long x = __shfl_xor_sync(FULL_MASK, v, o);
        v = x > v ? x : v;
    }
    return v;
}

// A lower bound of top-k's threshold rank that few elements pass (k <= SAMPLE_POOL / 2):
// any k distinct elements' smallest rank (the k-th element's rank is at least it, so every
// element of the top k passes). The elements are the threads' own largest ranks (thread t
// takes ids t, t + SAMPLE_THREADS, ...): up to k = 64 each warp's two largest of them, the
// bound the k-th of those 64; above, the k-th largest of all SAMPLE_THREADS. 0 (all pass)
// when fewer than k such elements exist. Uses the pool as scratch.
__device__ unsigned long long topk_bound(const float* logits, int n, uint32_t k,
                                         unsigned long long* pool) {
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;
    // The thread's largest rank as its key and id (32-bit compares: the pass is bound by the
    // one SM's instruction issue). Its ids rise through the pass, so keeping the first of
    // equal keys keeps the larger rank; `bi` NONE until the first element in range.
    const uint32_t NONE = 0xFFFFFFFFu;
    uint32_t bk = 0, bi = NONE;
    float v[SAMPLE_UNROLL];
    for (int i0 = t; i0 < n; i0 += SAMPLE_THREADS * SAMPLE_UNROLL) {
        load_turn(logits, i0, SAMPLE_THREADS, n, 0.0f, v);
#pragma unroll
        for (int u = 0; u < SAMPLE_UNROLL; ++u) {
            const int i = i0 + SAMPLE_THREADS * u;
            const uint32_t k = order_key(v[u]);
            if (i < n && (k > bk || bi == NONE)) {
                bk = k;
                bi = (uint32_t)i;
            }
        }
    }
    const unsigned long long best = bi == NONE ? 0ull : rank_of(bk, bi);
    if (k <= 2 * SAMPLE_WARPS) {
        const unsigned long long m1 = warp_max_u64(best);
        const unsigned long long m2 = warp_max_u64(best == m1 ? 0ull : best);
        if (lane == 0) {
            pool[2 * w] = m1;
            pool[2 * w + 1] = m2;
        }
        __syncthreads();
        pool_sort_desc(pool, 0, 2 * SAMPLE_WARPS);
    } else {
        pool[t] = best;  // SAMPLE_POOL == SAMPLE_THREADS
        __syncthreads();
        pool_sort_desc(pool, 0);
    }
    const unsigned long long r = pool[k - 1];
    __syncthreads();
    return r;
}

// The draw over pool[0..m) in ascending id, exactly sample.rs's loop (one thread).
__device__ uint32_t pool_draw(const unsigned long long* pool, float* w, uint32_t m, float inv_t,
                              float u, SampleShared& sh) {
    const int t = threadIdx.x;
    const float mx = block_max((uint32_t)t < m ? rank_logit(pool[t]) : NEG_INF, sh.red);
    const float mxt = __fmul_rn(mx, inv_t);
    w[t] = (uint32_t)t < m ? expf(__fsub_rn(__fmul_rn(rank_logit(pool[t]), inv_t), mxt)) : 0.0f;
    __syncthreads();
    if (t == 0) {
        float total = 0.0f;
        for (uint32_t j = 0; j < m; ++j) total = __fadd_rn(total, w[j]);
        const float target = __fmul_rn(u, total);
        uint32_t tok = m > 0 ? rank_id(pool[m - 1]) : 0u;
        float acc = 0.0f;
        for (uint32_t j = 0; j < m; ++j) {
            acc = __fadd_rn(acc, w[j]);
            if (acc > target) { tok = rank_id(pool[j]); break; }
        }
        sh.u32v[3] = tok;
    }
    __syncthreads();
    const uint32_t r = sh.u32v[3];
    __syncthreads();
    return r;
}

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) sample_advance(SampleParams p) {
    __shared__ SampleShared sh;
    const int t = threadIdx.x;
    const int n = p.n;
    float* logits = p.logits;
    const uint32_t pos = p.state->pos, plen = p.state->prompt_len;
    __syncthreads();  // every thread has read the state before thread 0 writes it
    if (pos + 1 < plen) {
        if (t == 0) p.state->pos = pos + 1;
        return;
    }
    const SampleConfig c = *p.config;

    // 1. Repetition penalty.
    if (c.window > 0 && c.penalty != 1.0f) {
        uint32_t* bits = (uint32_t*)sh.raw;
        const int words = (min(n, SAMPLE_MAX_VOCAB) + 31) / 32;
        for (int i = t; i < words; i += SAMPLE_THREADS) bits[i] = 0;
        __syncthreads();
        const uint32_t w = min(c.window, pos + 1), start = pos + 1 - w;
        for (uint32_t i = t; i < w; i += SAMPLE_THREADS) {
            const uint32_t tok = start + i < (uint32_t)p.seq_cap ? p.seq[start + i] : 0xFFFFFFFFu;
            if (tok >= (uint32_t)n || tok >= SAMPLE_MAX_VOCAB) continue;
            const uint32_t bit = 1u << (tok & 31);
            if (atomicOr(&bits[tok >> 5], bit) & bit) continue;
            const float l = logits[tok];
            logits[tok] = l <= 0.0f ? __fmul_rn(l, c.penalty) : __fdiv_rn(l, c.penalty);
        }
        __syncthreads();
    }

    uint32_t token;
    if (c.greedy) {
        // 2. Greedy (sample.rs argmax): the largest logit, the lowest id among equal ones
        // (the same pick in any order of comparison), by shuffles within each warp, then
        // over the warps'.
        float* rv = (float*)sh.red;
        int* ri = (int*)(rv + SAMPLE_THREADS);
        const int lane = t & 31, w = t >> 5;
        float best = NEG_INF;
        int at = 0x7fffffff;
        float v[SAMPLE_UNROLL];
        for (int i0 = t; i0 < n; i0 += SAMPLE_THREADS * SAMPLE_UNROLL) {
            load_turn(logits, i0, SAMPLE_THREADS, n, NEG_INF, v);
#pragma unroll
            for (int u = 0; u < SAMPLE_UNROLL; ++u)
                if (v[u] > best) { best = v[u]; at = i0 + SAMPLE_THREADS * u; }
        }
        for (int round = 0; round < 2; ++round) {
            for (int o = 16; o > 0; o >>= 1) {
                const float v2 = __shfl_xor_sync(FULL_MASK, best, o);
                const int i2 = __shfl_xor_sync(FULL_MASK, at, o);
                if (v2 > best || (v2 == best && i2 < at)) { best = v2; at = i2; }
            }
            if (round == 0) {
                if (lane == 0) { rv[w] = best; ri[w] = at; }
                __syncthreads();
                best = lane < SAMPLE_WARPS ? rv[lane] : NEG_INF;
                at = lane < SAMPLE_WARPS ? ri[lane] : 0x7fffffff;
            }
        }
        token = at == 0x7fffffff ? 0u : (uint32_t)at;
        __syncthreads();
    } else {
        uint32_t ctr[4] = {pos + 1 - plen, 0u, c.request_lo, c.request_hi};
        philox4x32_10(ctr, c.seed_lo, c.seed_hi);
        const float u = (float)(ctr[0] >> 8) * (1.0f / 16777216.0f);
        unsigned long long* pool = sh.raw;
        float* pw = (float*)(sh.raw + SAMPLE_POOL);
        const bool topk = c.top_k > 0 && c.top_k < (uint32_t)n;
        const int minp = c.min_p > 0.0f;

        // 3. Top-k. Up to SAMPLE_POOL / 2: the elements passing `topk_bound` into the pool,
        // sorted, and the first k kept, where they fit the pool (they do unless many logits
        // tie or k is large: over 49,152 i.i.d. logits the bound at k = 512 is the median
        // of 1,024 maxima of 48, which about 700 pass). Otherwise the threshold rank of the
        // k-th element by radix select (the gathered pool is dropped). Either way the pool
        // ends with the top k in rank order: every later step sees the same pool.
        unsigned long long thr = 0;
        bool gathered = false;
        uint32_t m = 0;
        if (topk && c.top_k <= SAMPLE_POOL / 2) {
            uint32_t all;
            m = pool_gather(logits, n, topk_bound(logits, n, c.top_k, pool), 0, 0.0f, pool, sh, &all);
            gathered = all <= SAMPLE_POOL;
        }
        if (topk && !gathered) {
            unsigned long long rest;
            uint32_t ties;
            const uint32_t key = radix_select(logits, n, 0, 0, 0.0f, c.top_k, &rest, &ties, sh);
            thr = rank_of(key, nth_tie(logits, n, key, 0, (uint32_t)rest, sh));
        }
        const uint32_t count = topk ? c.top_k : (uint32_t)n;
        if (count <= SAMPLE_POOL) {
            // The CPU's code on at most SAMPLE_POOL candidates.
            if (!gathered) m = pool_gather(logits, n, thr, 0, 0.0f, pool, sh);
            bool sorted = topk;
            if (topk) {
                pool_sort_desc(pool, 0, m);
                if (m > c.top_k) {
                    m = c.top_k;
                    if ((uint32_t)t >= m) pool[t] = 0;
                    __syncthreads();
                }
            }
            if (c.top_p < 1.0f) {
                // 4. Top-p: total in the CPU's candidate order (sorted when top-k ran,
                // else ascending id), then the smallest prefix reaching top_p * total.
                const float mx = block_max((uint32_t)t < m ? rank_logit(pool[t]) : NEG_INF, sh.red);
                pw[t] = (uint32_t)t < m ? expf(__fsub_rn(rank_logit(pool[t]), mx)) : 0.0f;
                __syncthreads();
                if (t == 0) {
                    float total = 0.0f;
                    for (uint32_t j = 0; j < m; ++j) total = __fadd_rn(total, pw[j]);
                    sh.f32v[0] = total;
                }
                __syncthreads();
                if (!sorted) {
                    pool_sort_desc(pool, 0, m);
                    sorted = true;
                    pw[t] = (uint32_t)t < m ? expf(__fsub_rn(rank_logit(pool[t]), mx)) : 0.0f;
                    __syncthreads();
                }
                if (t == 0) {
                    const float target = __fmul_rn(c.top_p, sh.f32v[0]);
                    float acc = 0.0f;
                    uint32_t keep = m;
                    for (uint32_t j = 0; j < m; ++j) {
                        acc = __fadd_rn(acc, pw[j]);
                        if (acc >= target) { keep = j + 1; break; }
                    }
                    sh.u32v[0] = keep;
                }
                __syncthreads();
                m = sh.u32v[0];
                if ((uint32_t)t >= m) pool[t] = 0;
                __syncthreads();
            }
            const uint32_t live = m;  // no live entry at or after it from here on
            if (minp) {
                // 5. Min-p over the candidates left (pool[0..m), all alive).
                const float mx = block_max((uint32_t)t < m ? rank_logit(pool[t]) : NEG_INF, sh.red);
                const float min_logit = __fadd_rn(mx, c.ln_min_p);
                const bool keep = (uint32_t)t < m && rank_logit(pool[t]) >= min_logit;
                uint32_t kept;
                block_scan(keep ? 1u : 0u, sh.red, &kept);
                // None kept (NaN logits only): the first candidate, as `kept.max(1)`.
                if (!keep && !(kept == 0 && t == 0)) pool[t] = 0;
                __syncthreads();
                m = kept > 0 ? kept : 1;
            }
            // 6.-7. Ascending id, temperature, draw.
            pool_sort_desc(pool, 1, live);
            token = pool_draw(pool, pw, m, c.inv_temp, u, sh);
        } else {
            // 4. Top-p by a radix select on fixed-point masses.
            float mx = 0.0f;
            if (c.top_p < 1.0f || minp) {
                float v = NEG_INF;
                for (int i = t; i < n; i += SAMPLE_THREADS) {
                    const float l = logits[i];
                    if (rank_of(order_key(l), (uint32_t)i) >= thr) v = fmaxf(v, l);
                }
                mx = block_max(v, sh.red);
            }
            if (c.top_p < 1.0f) {
                unsigned long long s = 0;
                for (int i = t; i < n; i += SAMPLE_THREADS) {
                    const float l = logits[i];
                    if (rank_of(order_key(l), (uint32_t)i) >= thr) s += mass_fx(l, mx);
                }
                const unsigned long long total = block_sum_u64(s, sh.red);
                const unsigned long long target =
                    (unsigned long long)ceil((double)c.top_p * (double)total);
                unsigned long long rest;
                uint32_t ties;
                const uint32_t key = radix_select(logits, n, thr, 1, mx, target, &rest, &ties, sh);
                const unsigned long long wk = mass_fx(key_value(key), mx);
                unsigned long long j = wk > 0 ? (rest + wk - 1) / wk : ties;
                if (j < 1) j = 1;
                if (j > ties) j = ties;
                thr = rank_of(key, nth_tie(logits, n, key, thr, (uint32_t)j, sh));
            }
            // 5. Min-p as a predicate.
            const float min_logit = minp ? __fadd_rn(mx, c.ln_min_p) : 0.0f;
            uint32_t alive = 0;
            for (int i = t; i < n; i += SAMPLE_THREADS)
                if (survives(logits[i], i, thr, minp, min_logit)) ++alive;
            const uint32_t m = (uint32_t)block_sum_u64(alive, sh.red);
            if (m <= SAMPLE_POOL) {
                const uint32_t g = pool_gather(logits, n, thr, minp, min_logit, pool, sh);
                token = pool_draw(pool, pw, g, c.inv_temp, u, sh);
            } else {
                // 6.-7. Chunked draw: thread t owns ids [t * chunk, (t + 1) * chunk).
                float v = NEG_INF;
                for (int i = t; i < n; i += SAMPLE_THREADS) {
                    const float l = logits[i];
                    if (survives(l, i, thr, minp, min_logit)) v = fmaxf(v, l);
                }
                const float mxt = __fmul_rn(block_max(v, sh.red), c.inv_temp);
                const int chunk = (n + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
                const int lo = min(n, t * chunk), hi = min(n, lo + chunk);
                float s = 0.0f;
                for (int i = lo; i < hi; ++i) {
                    const float l = logits[i];
                    if (survives(l, i, thr, minp, min_logit))
                        s = __fadd_rn(s, expf(__fsub_rn(__fmul_rn(l, c.inv_temp), mxt)));
                }
                pw[t] = s;
                __syncthreads();
                if (t == 0) {
                    float total = 0.0f;
                    for (int j = 0; j < SAMPLE_THREADS; ++j) total = __fadd_rn(total, pw[j]);
                    const float target = __fmul_rn(u, total);
                    float acc = 0.0f;
                    int owner = -1, last = 0;
                    float before = 0.0f;
                    for (int j = 0; j < SAMPLE_THREADS; ++j) {
                        if (pw[j] > 0.0f) last = j;
                        const float next = __fadd_rn(acc, pw[j]);
                        if (owner < 0 && next > target) { owner = j; before = acc; }
                        acc = next;
                    }
                    sh.u32v[0] = owner < 0 ? (uint32_t)last : (uint32_t)owner;
                    sh.f32v[0] = owner < 0 ? 0.0f : before;
                    sh.f32v[1] = owner < 0 ? __int_as_float(0x7f800000) : target;  // none: the last survivor
                    sh.u32v[3] = 0;
                }
                __syncthreads();
                if ((uint32_t)t == sh.u32v[0]) {
                    float acc = sh.f32v[0];
                    const float target = sh.f32v[1];
                    uint32_t tok = 0;
                    for (int i = lo; i < hi; ++i) {
                        const float l = logits[i];
                        if (!survives(l, i, thr, minp, min_logit)) continue;
                        tok = (uint32_t)i;
                        acc = __fadd_rn(acc, expf(__fsub_rn(__fmul_rn(l, c.inv_temp), mxt)));
                        if (acc > target) break;
                    }
                    sh.u32v[3] = tok;
                }
                __syncthreads();
                token = sh.u32v[3];
            }
        }
    }
    __syncthreads();
    if (t == 0) {
        p.state->token = token;
        if (pos + 1 < (uint32_t)p.seq_cap) p.seq[pos + 1] = token;
        p.state->pos = pos + 1;
    }
}

// =======================================================================================
// PREFILL (issue 26): the prompt in chunks of up to `chunk` tokens, one captured graph per
// chunk size (src/gpu/prefill.rs lowers the program, src/gpu/prefill_graph.rs places the
// buffers and captures). Every kernel reads the chunk from the request state: its first
// position `start = state->pos` and its token count `n = min(chunk, prompt_len - start)`,
// so one graph serves every chunk of every prompt; `chunk_advance` + the decode step's
// `sample_advance` end the graph (position + n, and the first token after the last chunk).
//
// The arithmetic of each token is the decode kernels' own, operation for operation (same
// 8-bit activation blocks, same per-lane block order and warp sums, same attention splits
// and merges, `__f*_rn` where they have them): the cache and the first token's logits
// after a prefill equal those of the token-by-token prefill bit for bit. Only the integer
// block sums are formed differently (`__dp4a` on four 8-bit products at a time), and
// integer sums are exact in any order. What changes is the reading: a warp reads each
// weight block once for MM_TOK tokens, and the whole chunk runs in ~11 launches per layer.
//
// Activations are `[chunk, width]` rows (row t = position start + t).
// =======================================================================================

#define MM_WARPS 4
#define MM_TOK 8

// The chunk the state points at: writes its first position, returns its token count.
__device__ __forceinline__ int chunk_tokens(const DecodeState* s, int chunk, uint32_t* start) {
    const uint32_t st = s->pos, plen = s->prompt_len;
    *start = st;
    if (st >= plen) return 0;
    const uint32_t left = plen - st;
    return left < (uint32_t)chunk ? (int)left : chunk;
}

// Rows [lo, hi) of a launch: every token of the chunk, or (`last`) the chunk's last token,
// and then only when this chunk ends the prompt. False: nothing to do.
__device__ __forceinline__ bool chunk_rows(const DecodeState* s, int chunk, int last, int* lo,
                                           int* hi) {
    uint32_t start;
    const int n = chunk_tokens(s, chunk, &start);
    if (n == 0) return false;
    if (last) {
        if (start + (uint32_t)n < s->prompt_len) return false;
        *lo = n - 1;
    } else {
        *lo = 0;
    }
    *hi = n;
    return true;
}


// ---------------------------------------------------------------------------------------
// embed_chunk: row t = the table row of prompt[start + t]. Grid (chunk), 256 threads.
// ---------------------------------------------------------------------------------------
struct EmbedChunkParams {
    const uint8_t* table;
    const uint32_t* prompt;
    DecodeState* state;
    float* out;  // [chunk, cols]
    int type;
    int cols;
    int row_bytes;
    int n_vocab;
    int chunk;
    int pad;
};

extern "C" __global__ void __launch_bounds__(256) embed_chunk(EmbedChunkParams p) {
    uint32_t start;
    const int n = chunk_tokens(p.state, p.chunk, &start);
    const int t = blockIdx.x;
    if (t >= n) return;
    uint32_t token = p.prompt[start + t];
    if (token >= (uint32_t)p.n_vocab) {
        if (threadIdx.x == 0) atomicCAS(&p.state->bad_token, 0u, token + 1);
        token = 0;
    }
    const uint8_t* row = p.table + (size_t)token * p.row_bytes;
    float* out = p.out + (size_t)t * p.cols;
    for (int i = threadIdx.x; i < p.cols; i += blockDim.x) out[i] = dequant_at(p.type, row, i);
}

// ---------------------------------------------------------------------------------------
// prep_chunk: `prep` of each row. Grid (chunk) (1 with `last`), PREP_THREADS threads.
// ---------------------------------------------------------------------------------------
struct PrepChunkParams {
    const float* in;
    const float* in2;
    const float* weight;
    float* out;
    BlockQ8* q8;
    BlockQ8K* q8k;
    const DecodeState* state;
    int n;
    float eps;
    int swiglu;
    int stride;      // floats per row of in, in2, out
    int q8_stride;   // Q8 blocks per row
    int q8k_stride;  // Q8_K blocks per row
    int chunk;
    int last;
};

// The body of `prep` for one row (the same operations in the same order).
__device__ void prep_row(const float* in, const float* in2, const float* weight, float* out,
                         BlockQ8* q8, BlockQ8K* q8k, int n, float eps, int swiglu) {
    __shared__ float s_x[PREP_STAGE];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const bool staged = n <= PREP_STAGE;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = in[i];
        if (swiglu) v = silu_mul(v, in2[i]);
        out[i] = v;
        if (staged) s_x[i] = v;
    }
    if (weight) {
        __syncthreads();
        const float scale = rms_scale_block(staged ? s_x : out, n, eps);
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            out[i] = __fmul_rn(__fmul_rn(out[i], scale), weight[i]);
    }
    __syncthreads();
    if (q8) {
        for (int b = warp; b < n / QK; b += nwarps) {
            const float v = out[b * QK + lane];
            const float amax = warp_max(fabsf(v));
            const float d = __fdiv_rn(amax, 127.0f);
            const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
            const int r = __float2int_rn(__fmul_rn(v, id));
            q8[b].qs[lane] = (int8_t)r;
            const int sum = warp_sum_i(r);
            if (lane == 0) {
                q8[b].d = round_f16(d);
                q8[b].s = round_f16(__fmul_rn(d, (float)sum));
            }
        }
    }
    if (q8k) {
        for (int b = warp; b < n / QK_K; b += nwarps) {
            const float* x = out + b * QK_K;
            float amax = 0.0f, mx = 0.0f;
            int at = 0x7fffffff;
            for (int k = 0; k < 8; ++k) {
                const int i = lane * 8 + k;
                const float a = fabsf(x[i]);
                if (a > amax) { amax = a; mx = x[i]; at = i; }
            }
            for (int o = 16; o > 0; o >>= 1) {
                const float a2 = __shfl_xor_sync(0xffffffffu, amax, o);
                const float m2 = __shfl_xor_sync(0xffffffffu, mx, o);
                const int at2 = __shfl_xor_sync(0xffffffffu, at, o);
                if (a2 > amax || (a2 == amax && at2 < at)) { amax = a2; mx = m2; at = at2; }
            }
            BlockQ8K* o8 = q8k + b;
            if (amax == 0.0f) {
                for (int k = 0; k < 8; ++k) o8->qs[lane * 8 + k] = 0;
                if (lane < 16) o8->bsums[lane] = 0;
                if (lane == 0) o8->d = 0.0f;
                continue;
            }
            const float iscale = __fdiv_rn(-127.0f, mx);
            int part = 0;
            for (int k = 0; k < 8; ++k) {
                const int i = lane * 8 + k;
                int q = __float2int_rn(__fmul_rn(iscale, x[i]));
                q = q < 127 ? q : 127;
                o8->qs[i] = (int8_t)q;
                part += q;
            }
            const int other = __shfl_down_sync(0xffffffffu, part, 1);
            if (lane % 2 == 0) o8->bsums[lane / 2] = (int16_t)(part + other);
            if (lane == 0) o8->d = __fdiv_rn(1.0f, iscale);
        }
    }
}

extern "C" __global__ void __launch_bounds__(PREP_THREADS) prep_chunk(PrepChunkParams p) {
    int lo, hi;
    if (!chunk_rows(p.state, p.chunk, p.last, &lo, &hi)) return;
    const int t = lo + blockIdx.x;
    if (t >= hi) return;
    const size_t r = (size_t)t * p.stride;
    prep_row(p.in + r, p.in2 ? p.in2 + r : nullptr, p.weight, p.out + r,
             p.q8 ? p.q8 + (size_t)t * p.q8_stride : nullptr,
             p.q8k ? p.q8k + (size_t)t * p.q8k_stride : nullptr, p.n, p.eps, p.swiglu);
}

// ---------------------------------------------------------------------------------------
// matmul_chunk: up to three projections of the chunk's rows. Grid (ceil(rows_total /
// (MM_WARPS * 4 * group_rows)), ceil(rows / tok_per_warp)); group_rows output rows per 8-lane
// group (4 groups per warp) and tok_per_warp tokens, in groups of MM_TOK: each weight block
// is read once for the MM_TOK tokens of a group, and with group_rows = MM_R (32-value block
// types) each token's activation block once for MM_R rows; each token's sum formed exactly as
// the decode step's (`row_dot8`).
// ---------------------------------------------------------------------------------------
struct ProjChunk {
    const uint8_t* w;
    const float* bias;  // or null
    float* out;
    int type;
    int rows;
    int row_bytes;
    int accumulate;
    int out_stride;  // floats per token row of `out` (0: one row, with `last`)
    int pad;
};

struct MatMulChunkParams {
    const float* x;
    const BlockQ8* q8;
    const BlockQ8K* q8k;
    const DecodeState* state;
    ProjChunk p[3];
    int nproj;
    int cols;
    int rows_total;
    int x_stride;    // floats per row of x
    int q8_stride;   // Q8 blocks per row
    int q8k_stride;  // Q8_K blocks per row
    int chunk;
    int last;
    int tok_per_warp;  // a multiple of MM_TOK
    int group_rows;    // rows per 8-lane group: MM_R (all projections Q8_0/Q4_0/Q4_1) or 1
};

// R consecutive weight rows of one projection of 32-value blocks (TYPE: Q8_0, Q4_0 or Q4_1)
// against NT activation rows: for each row and token exactly `row_dot8<NT>`'s operations in
// its order (lane l = lane & 7 of an 8-lane group: block after block, the exact integer sum of
// elements 4l .. 4l + 4 by one `__dp4a`, one fused multiply-add by the product of the scales;
// Q4_1's chain of m * s; the fixed 8-lane tree; Q4_1's correction), so each sum has the same
// bits as `row_dot8`'s. What differs is only the reading: each block's activations of the NT
// tokens are loaded once for R rows, and each weight block once for NT tokens. Row i starts
// at w + i * row_bytes; tokens j >= cnt repeat row cnt - 1 (not to be stored). out[i][j] (in
// every lane of the group) is row i's sum for token j. All 32 lanes of the warp call it.
template <int TYPE, int R, int NT>
__device__ __noinline__ void rows_dot8_q32(const uint8_t* w, int row_bytes, int cols,
                                           const BlockQ8* q8, size_t q8s, int l, int cnt,
                                           float out[R][NT]) {
    constexpr int bb = TYPE == T_Q8_0 ? 34 : (TYPE == T_Q4_0 ? 18 : 20);
    float acc[R][NT], ext[R][NT];
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[i][j] = ext[i][j] = 0.0f;
    const int nb = cols / QK;
#pragma unroll 1
    for (int b = 0; b < nb; ++b) {
        int aq[NT];
        float ad[NT], as[NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const BlockQ8& a = q8[(j < cnt ? j : cnt - 1) * q8s + b];
            aq[j] = *(const int*)(a.qs + 4 * l);
            ad[j] = a.d;
            if (TYPE == T_Q4_1) as[j] = a.s;
        }
        uint16_t d16[R], m16[R];
        uint32_t v32[R];
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const uint8_t* blk = w + (size_t)i * row_bytes + (size_t)b * bb;
            d16[i] = *(const uint16_t*)blk;
            m16[i] = TYPE == T_Q4_1 ? *(const uint16_t*)(blk + 2) : 0;
            if (TYPE == T_Q4_1) {
                v32[i] = *(const uint32_t*)(blk + 4 + 4 * (l & 3));
            } else {
                const uint16_t* q = (const uint16_t*)(blk + 2 + 4 * (TYPE == T_Q8_0 ? l : (l & 3)));
                v32[i] = (uint32_t)q[0] | ((uint32_t)q[1] << 16);
            }
        }
#pragma unroll
        for (int i = 0; i < R; ++i) {
            int wq;
            if (TYPE == T_Q8_0) {
                wq = (int)v32[i];
            } else {
                uint32_t q = (l < 4 ? v32[i] : v32[i] >> 4) & 0x0F0F0F0Fu;
                if (TYPE == T_Q4_0) q = __vsub4(q, 0x08080808u);
                wq = (int)q;
            }
            const float dw = h2f(d16[i]), mw = h2f(m16[i]);
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int si = __dp4a(wq, aq[j], 0);
                acc[i][j] = __fmaf_rn(__fmul_rn(dw, ad[j]), (float)si, acc[i][j]);
                if (TYPE == T_Q4_1) ext[i][j] = __fmaf_rn(mw, as[j], ext[i][j]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            float h = hsum8_group(acc[i][j]);
            if (TYPE == T_Q4_1) h = __fadd_rn(h, ext[i][j]);
            out[i][j] = h;
        }
}

// Rows per 8-lane group when every projection of a launch has 32-value blocks
// (`MatMulChunkParams::group_rows`; 1 otherwise).
#define MM_R 4

// Stores out = sum (+ bias) or out += sum (+ bias) for token t of row r of projection pr.
__device__ __forceinline__ void mm_store(const ProjChunk& pr, int r, int t, float v) {
    if (pr.bias) v = __fadd_rn(v, pr.bias[r]);
    float* out = pr.out + (size_t)t * pr.out_stride + r;
    *out = pr.accumulate ? __fadd_rn(*out, v) : v;
}

extern "C" __global__ void __launch_bounds__(MM_WARPS * 32) matmul_chunk(MatMulChunkParams p) {
    int lo, hi;
    if (!chunk_rows(p.state, p.chunk, p.last, &lo, &hi)) return;
    const int tw = lo + blockIdx.y * p.tok_per_warp;
    if (tw >= hi) return;
    const int tend = min(hi, tw + p.tok_per_warp);
    const int l = threadIdx.x & 7, g = (threadIdx.x & 31) / 8;
    // group_rows (R) consecutive rows per 8-lane group, 4 R per warp: warp-uniform from here.
    const int R = p.group_rows == MM_R ? MM_R : 1;
    const int w0 = blockIdx.x * (MM_WARPS * 4 * R) + (threadIdx.x / 32) * 4 * R;
    if (w0 >= p.rows_total) return;  // whole warps
    int rw = w0, kw = 0;
    while (kw + 1 < p.nproj && rw >= p.p[kw].rows) {
        rw -= p.p[kw].rows;
        ++kw;
    }
    const ProjChunk& pw = p.p[kw];
    // The warp's 4 R rows in one projection of 32-value blocks: R rows per group at once.
    if (R == MM_R && rw + 4 * MM_R <= pw.rows &&
        (pw.type == T_Q8_0 || pw.type == T_Q4_0 || pw.type == T_Q4_1)) {
        const int r = rw + g * MM_R;
        const uint8_t* w = pw.w + (size_t)r * pw.row_bytes;
        for (int t0 = tw; t0 < tend; t0 += MM_TOK) {
            const int cnt = min(MM_TOK, tend - t0);
            const BlockQ8* q8 = p.q8 + (size_t)t0 * p.q8_stride;
            float o[MM_R][MM_TOK];
            if (pw.type == T_Q4_1)
                rows_dot8_q32<T_Q4_1, MM_R, MM_TOK>(w, pw.row_bytes, p.cols, q8, p.q8_stride, l, cnt, o);
            else if (pw.type == T_Q4_0)
                rows_dot8_q32<T_Q4_0, MM_R, MM_TOK>(w, pw.row_bytes, p.cols, q8, p.q8_stride, l, cnt, o);
            else
                rows_dot8_q32<T_Q8_0, MM_R, MM_TOK>(w, pw.row_bytes, p.cols, q8, p.q8_stride, l, cnt, o);
            // Lane l stores token l's sums (every lane of the group holds all of them).
#pragma unroll
            for (int j = 0; j < MM_TOK; ++j) {
                if (j != l || j >= cnt) continue;
#pragma unroll
                for (int i = 0; i < MM_R; ++i) mm_store(pw, r + i, t0 + j, o[i][j]);
            }
        }
        return;
    }
    // Otherwise row after row, one per group at a time (`row_dot8`).
    for (int i = 0; i < R; ++i) {
        const int r0 = w0 + g * R + i;
        int r = r0 < p.rows_total ? r0 : p.rows_total - 1, k = 0;
        while (k + 1 < p.nproj && r >= p.p[k].rows) {
            r -= p.p[k].rows;
            ++k;
        }
        const ProjChunk& pr = p.p[k];
        const uint8_t* w = pr.w + (size_t)r * pr.row_bytes;
        for (int t0 = tw; t0 < tend; t0 += MM_TOK) {
            const int cnt = min(MM_TOK, tend - t0);
            float o[MM_TOK];
            row_dot8<MM_TOK>(pr.type, w, p.cols, p.x + (size_t)t0 * p.x_stride, p.x_stride,
                             p.q8 + (size_t)t0 * p.q8_stride, p.q8_stride,
                             p.q8k + (size_t)t0 * p.q8k_stride, p.q8k_stride, l, cnt, o);
            if (r0 < p.rows_total && l == 0) {
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) {
                    if (j >= cnt) break;
                    mm_store(pr, r, t0 + j, o[j]);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// head_norm_chunk: `head_norm` of each row. Grid (ceil(heads / 4), chunk), 128 threads.
// ---------------------------------------------------------------------------------------
struct HeadNormChunkParams {
    float* x;
    const float* weight;
    const DecodeState* state;
    int heads;
    int head_dim;
    float eps;
    int stride;  // floats per row
    int chunk;
    int pad;
};

extern "C" __global__ void __launch_bounds__(128) head_norm_chunk(HeadNormChunkParams p) {
    uint32_t start;
    const int n = chunk_tokens(p.state, p.chunk, &start);
    const int t = blockIdx.y;
    if (t >= n) return;
    const int lane = threadIdx.x % 32;
    const int h = blockIdx.x * 4 + threadIdx.x / 32;
    if (h >= p.heads) return;
    float* x = p.x + (size_t)t * p.stride + h * p.head_dim;
    const float scale = rms_scale_warp(x, p.head_dim, p.eps);
    for (int i = lane; i < p.head_dim; i += 32) x[i] = __fmul_rn(__fmul_rn(x[i], scale), p.weight[i]);
}

// ---------------------------------------------------------------------------------------
// rope_chunk: `rope` of row t at position start + t (with a cache: K and V of the row into
// the cache at that position). Grid (ceil(heads * head_dim / 2 / 128), chunk), 128 threads.
// ---------------------------------------------------------------------------------------
struct RopeChunkParams {
    float* x;
    const float* angles;  // [n_ctx, head_dim] as `rope`'s
    const DecodeState* state;
    uint16_t* kcache;  // or null
    uint16_t* vcache;
    const float* v;
    int heads;
    int head_dim;
    int kv_dim;
    int x_stride;  // floats per row of x
    int v_stride;  // floats per row of v
    int chunk;
    int form;      // ROPE_FUSED | ROPE_INTERLEAVED
    int pad;
};

extern "C" __global__ void __launch_bounds__(128) rope_chunk(RopeChunkParams p) {
    uint32_t start;
    const int n = chunk_tokens(p.state, p.chunk, &start);
    const int row = blockIdx.y;
    if (row >= n) return;
    const int half = p.head_dim / 2;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= p.heads * half) return;
    const int h = t / half, i = t % half;
    const uint32_t pos = start + row;
    float* x = p.x + (size_t)row * p.x_stride + h * p.head_dim;
    const float* ang = p.angles + (size_t)pos * p.head_dim;
    float na, nb;
    rope_pair(x[i], x[i + half], ang[i], ang[half + i], p.form & ROPE_FUSED, &na, &nb);
    x[i] = na;
    x[i + half] = nb;
    if (p.kcache) {
        const int il = p.form & ROPE_INTERLEAVED;
        const float* v = p.v + (size_t)row * p.v_stride;
        const size_t at = (size_t)pos * p.kv_dim + h * p.head_dim;
        p.kcache[at + lane_slot(i, half, il)] = f2h(na);
        p.kcache[at + lane_slot(i + half, half, il)] = f2h(nb);
        p.vcache[at + i] = f2h(v[h * p.head_dim + i]);
        p.vcache[at + i + half] = f2h(v[h * p.head_dim + i + half]);
    }
}

// ---------------------------------------------------------------------------------------
// attention_chunk: `attend` of row t (position start + t) over positions 0 ..= start + t
// (causal). Grid (n_head, chunk), ATT_THREADS threads. The order is the CPU engine's for the
// prompt cut into forward chunks of `batch` tokens (generate.rs `prefill`: llama.cpp's
// n_ubatch): Gemm, except for a token alone in its chunk (Gemv): every token with
// batch 1, else the prompt's last token when it starts a chunk.
// ---------------------------------------------------------------------------------------
struct AttnChunkParams {
    const float* q;        // [chunk, q_stride], Hugging Face lane order
    const uint16_t* kcache;
    const uint16_t* vcache;
    float* out;            // [chunk, q_stride]
    const DecodeState* state;
    int n_head;
    int n_kv;
    int head_dim;
    int kv_dim;
    float scale;
    int batch;             // the CPU engine's prompt tokens per forward chunk (>= 1)
    int q_stride;          // floats per row of q and out
    int chunk;
    int interleaved;
    int pad;
};

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_chunk(AttnChunkParams p) {
    uint32_t start;
    const int n = chunk_tokens(p.state, p.chunk, &start);
    const int row = blockIdx.y;
    if (row >= n) return;
    const uint32_t pos = start + row;
    const bool alone =
        p.batch == 1 || (pos % (uint32_t)p.batch == 0 && pos + 1 == p.state->prompt_len);
    const int h = blockIdx.x, kvh = h / (p.n_head / p.n_kv);
    attend(p.q + (size_t)row * p.q_stride + h * p.head_dim, p.kcache + kvh * p.head_dim,
           p.vcache + kvh * p.head_dim, p.kv_dim, p.head_dim, (int)pos + 1, p.scale, !alone,
           p.interleaved, p.out + (size_t)row * p.q_stride + h * p.head_dim);
}

// ---------------------------------------------------------------------------------------
// chunk_advance: position = start + n - 1, the chunk's last token, so that the decode step's
// `sample_advance` that follows moves to start + n (inside the prompt) or chooses the first
// token (after the last chunk). One thread.
// ---------------------------------------------------------------------------------------
struct ChunkAdvanceParams {
    DecodeState* state;
    int chunk;
    int pad;
};

extern "C" __global__ void chunk_advance(ChunkAdvanceParams p) {
    uint32_t start;
    const int n = chunk_tokens(p.state, p.chunk, &start);
    if (n > 0) p.state->pos = start + (uint32_t)n - 1;
}
