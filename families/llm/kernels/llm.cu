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
// (ties to even, scales through f16), the integer block sums are exact, only the order of
// the f32 additions across blocks and positions differs (warp reductions).
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

extern "C" __global__ void __launch_bounds__(PREP_THREADS) prep(PrepParams p) {
    __shared__ float red[PREP_THREADS / 32];
    __shared__ float s_scale;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
        float v = p.in[i];
        if (p.swiglu) v = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), p.in2[i]);
        ss = __fadd_rn(ss, __fmul_rn(v, v));
        p.out[i] = v;
    }
    if (p.weight) {
        ss = warp_sum(ss);
        if (lane == 0) red[warp] = ss;
        __syncthreads();
        if (warp == 0) {
            float t = lane < nwarps ? red[lane] : 0.0f;
            t = warp_sum(t);
            if (lane == 0) s_scale = __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(t, (float)p.n), p.eps)));
        }
        __syncthreads();
        const float scale = s_scale;
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

__device__ float row_dot(const MatVecParams& p, const Proj& pr, const uint8_t* w, int lane) {
    float acc = 0.0f;
    switch (pr.type) {
        case T_F32:
        case T_F16:
        case T_BF16:
            for (int i = lane; i < p.cols; i += 32) {
                float wv;
                if (pr.type == T_F32) wv = ((const float*)w)[i];
                else if (pr.type == T_F16) wv = h2f(ld16(w + 2 * i));
                else wv = bf2f(ld16(w + 2 * i));
                acc = __fadd_rn(acc, __fmul_rn(wv, p.x[i]));
            }
            break;
        case T_Q8_0:
            for (int b = lane; b < p.cols / QK; b += 32) {
                const uint8_t* blk = w + b * 34;
                const BlockQ8& a = p.q8[b];
                int sumi = 0;
                for (int i = 0; i < QK; ++i) sumi += (int)(int8_t)blk[2 + i] * (int)a.qs[i];
                acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(h2f(ld16(blk)), a.d), (float)sumi));
            }
            break;
        case T_Q4_0:
            for (int b = lane; b < p.cols / QK; b += 32) {
                const uint8_t* blk = w + b * 18;
                const BlockQ8& a = p.q8[b];
                int sumi = 0;
                for (int i = 0; i < 16; ++i) {
                    const int q = blk[2 + i];
                    sumi += ((q & 0x0F) - 8) * (int)a.qs[i];
                    sumi += ((q >> 4) - 8) * (int)a.qs[i + 16];
                }
                acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(h2f(ld16(blk)), a.d), (float)sumi));
            }
            break;
        case T_Q4_1:
            for (int b = lane; b < p.cols / QK; b += 32) {
                const uint8_t* blk = w + b * 20;
                const BlockQ8& a = p.q8[b];
                const uint32_t* qw = (const uint32_t*)(blk + 4);  // 20-byte blocks: 4-aligned
                int sumi = 0;
                for (int k = 0; k < 4; ++k) {
                    const uint32_t v = qw[k];
                    for (int e = 0; e < 4; ++e) {
                        const int q = (v >> (8 * e)) & 0xFF;
                        const int i = 4 * k + e;
                        sumi += (q & 0x0F) * (int)a.qs[i];
                        sumi += (q >> 4) * (int)a.qs[i + 16];
                    }
                }
                const float t = __fmul_rn(__fmul_rn(h2f(ld16(blk)), a.d), (float)sumi);
                acc = __fadd_rn(acc, __fadd_rn(t, __fmul_rn(h2f(ld16(blk + 2)), a.s)));
            }
            break;
        case T_Q4_K:
            for (int b = lane; b < p.cols / QK_K; b += 32) {
                const uint8_t* blk = w + b * 144;
                const BlockQ8K& a = p.q8k[b];
                int sumi = 0, summ = 0;
                for (int j = 0; j < 8; ++j) {
                    int sc, mn;
                    q4k_scale_min(blk + 4, j, &sc, &mn);
                    const uint8_t* qs = blk + 16 + 32 * (j / 2);
                    const int shift = 4 * (j % 2);
                    int s = 0;
                    for (int l = 0; l < 32; ++l) s += ((qs[l] >> shift) & 0x0F) * (int)a.qs[32 * j + l];
                    sumi += sc * s;
                    summ += mn * ((int)a.bsums[2 * j] + (int)a.bsums[2 * j + 1]);
                }
                const float t1 = __fmul_rn(__fmul_rn(a.d, h2f(ld16(blk))), (float)sumi);
                const float t2 = __fmul_rn(__fmul_rn(a.d, h2f(ld16(blk + 2))), (float)summ);
                acc = __fadd_rn(acc, __fsub_rn(t1, t2));
            }
            break;
        case T_Q6_K:
            for (int b = lane; b < p.cols / QK_K; b += 32) {
                const uint8_t* blk = w + b * 210;
                const BlockQ8K& a = p.q8k[b];
                int sumi = 0;
                for (int g = 0; g < 16; ++g) {
                    int s = 0;
                    for (int l = 0; l < 16; ++l) s += q6k_value(blk, 16 * g + l) * (int)a.qs[16 * g + l];
                    sumi += (int)(int8_t)blk[192 + g] * s;
                }
                acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(a.d, h2f(ld16(blk + 208))), (float)sumi));
            }
            break;
        default:
            acc = __int_as_float(0x7fc00000);
            break;
    }
    return warp_sum(acc);
}

extern "C" __global__ void __launch_bounds__(MV_WARPS * 32) matvec(MatVecParams p) {
    const int lane = threadIdx.x % 32;
    int r = blockIdx.x * MV_WARPS + threadIdx.x / 32;
    if (r >= p.rows_total) return;
    int k = 0;
    while (k + 1 < p.nproj && r >= p.p[k].rows) {
        r -= p.p[k].rows;
        ++k;
    }
    const Proj& pr = p.p[k];
    const float dot = row_dot(p, pr, pr.w + (size_t)r * pr.row_bytes, lane);
    if (lane == 0) {
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
    float ss = 0.0f;
    for (int i = lane; i < p.head_dim; i += 32) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
    ss = warp_sum(ss);
    const float scale = __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(ss, (float)p.head_dim), p.eps)));
    for (int i = lane; i < p.head_dim; i += 32) x[i] = __fmul_rn(__fmul_rn(x[i], scale), p.weight[i]);
}

// ---------------------------------------------------------------------------------------
// rope: rotate-half RoPE of each head of `x` at the state's position; with a cache, the
// rotated keys and the values (f16) are written at that position (RoPE fused with the cache
// write). One thread per rotated pair.
// ---------------------------------------------------------------------------------------
struct RopeParams {
    float* x;
    const float* inv_freq;   // [head_dim / 2]
    const DecodeState* state;
    uint16_t* kcache;        // [n_ctx, kv_dim] f16 of this layer, or null
    uint16_t* vcache;
    const float* v;          // [kv_dim]
    int heads;
    int head_dim;
    int kv_dim;
    int pad;
};

extern "C" __global__ void __launch_bounds__(128) rope(RopeParams p) {
    const int half = p.head_dim / 2;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= p.heads * half) return;
    const int h = t / half, i = t % half;
    const uint32_t pos = p.state->pos;
    float* x = p.x + h * p.head_dim;
    const float ang = __fmul_rn((float)pos, p.inv_freq[i]);
    float s, c;
    sincosf(ang, &s, &c);
    const float a = x[i], b = x[i + half];
    const float na = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    const float nb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    x[i] = na;
    x[i + half] = nb;
    if (p.kcache) {
        const size_t at = (size_t)pos * p.kv_dim + h * p.head_dim;
        p.kcache[at + i] = f2h(na);
        p.kcache[at + i + half] = f2h(nb);
        p.vcache[at + i] = f2h(p.v[h * p.head_dim + i]);
        p.vcache[at + i + half] = f2h(p.v[h * p.head_dim + i + half]);
    }
}

// ---------------------------------------------------------------------------------------
// attention (split over positions, flash-decoding): grid (n_head, ATTN_SPLITS), 8 warps per
// block; global warp g of a head takes cache positions g, g + 8 * ATTN_SPLITS, ... up to pos
// (length read from the state), grouped query heads (head h reads KV head h / (n_head /
// n_kv)). Online softmax per warp, the block's warps merged in shared memory into one
// partial (max, sum, unnormalised output) per (head, split); `attention_combine` merges the
// splits.
// ---------------------------------------------------------------------------------------
struct AttnParams {
    const float* q;          // [n_head * head_dim]
    const uint16_t* kcache;  // [n_ctx, kv_dim] f16
    const uint16_t* vcache;
    float* part;             // [n_head, splits, 2 + head_dim] partials
    const DecodeState* state;
    int n_head;
    int n_kv;
    int head_dim;
    int kv_dim;
    float scale;             // 1 / sqrt(head_dim)
    int splits;              // gridDim.y
};

// The partial of block (head blockIdx.x, split blockIdx.y); every thread of the block calls it.
__device__ __forceinline__ void attention_partial(const AttnParams& p) {
    __shared__ float s_m[ATTN_WARPS], s_l[ATTN_WARPS];
    __shared__ float s_acc[ATTN_WARPS][MAX_HEAD_DIM];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int h = blockIdx.x, split = blockIdx.y;
    const int kvh = h / (p.n_head / p.n_kv);
    const int len = (int)p.state->pos + 1;
    const int per = (p.head_dim + 31) / 32;  // <= 8
    const int stride = ATTN_WARPS * p.splits;
    float q[MAX_HEAD_DIM / 32], acc[MAX_HEAD_DIM / 32];
#pragma unroll
    for (int j = 0; j < MAX_HEAD_DIM / 32; ++j) {
        const int i = lane + 32 * j;
        q[j] = (j < per && i < p.head_dim) ? p.q[h * p.head_dim + i] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (int t = split * ATTN_WARPS + warp; t < len; t += stride) {
        const uint16_t* k = p.kcache + (size_t)t * p.kv_dim + kvh * p.head_dim;
        const uint16_t* v = p.vcache + (size_t)t * p.kv_dim + kvh * p.head_dim;
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < MAX_HEAD_DIM / 32; ++j) {
            const int i = lane + 32 * j;
            if (j < per && i < p.head_dim) d = __fadd_rn(d, __fmul_rn(q[j], h2f(k[i])));
        }
        const float s = __fmul_rn(warp_sum(d), p.scale);
        const float mn = fmaxf(m, s);
        const float corr = expf(m - mn);
        const float e = expf(s - mn);
        l = __fadd_rn(__fmul_rn(l, corr), e);
#pragma unroll
        for (int j = 0; j < MAX_HEAD_DIM / 32; ++j) {
            const int i = lane + 32 * j;
            if (j < per && i < p.head_dim)
                acc[j] = __fadd_rn(__fmul_rn(acc[j], corr), __fmul_rn(e, h2f(v[i])));
        }
        m = mn;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < MAX_HEAD_DIM / 32; ++j) {
        const int i = lane + 32 * j;
        if (j < per && i < p.head_dim) s_acc[warp][i] = acc[j];
    }
    __syncthreads();
    float mx = NEG_INF;
    for (int w = 0; w < ATTN_WARPS; ++w)
        if (s_l[w] != 0.0f) mx = fmaxf(mx, s_m[w]);
    float* out = p.part + ((size_t)h * p.splits + split) * (2 + p.head_dim);
    for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < ATTN_WARPS; ++w) {
            if (s_l[w] == 0.0f) continue;  // a warp that saw no position
            o = __fadd_rn(o, __fmul_rn(s_acc[w][i], expf(s_m[w] - mx)));
        }
        out[2 + i] = o;
    }
    if (threadIdx.x == 0) {
        float tot = 0.0f;
        for (int w = 0; w < ATTN_WARPS; ++w) {
            if (s_l[w] == 0.0f) continue;
            tot = __fadd_rn(tot, __fmul_rn(s_l[w], expf(s_m[w] - mx)));
        }
        out[0] = mx;
        out[1] = tot;
    }
}

extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention(AttnParams p) {
    attention_partial(p);
}

struct AttnCombineParams {
    const float* part;  // [n_head, splits, 2 + head_dim]
    float* out;         // [n_head * head_dim]
    int head_dim;
    int splits;
};

// Head h: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M). The partials are read
// through L2 (__ldcg): in `attention_fused` other blocks wrote them during this launch.
// Every split's (m, l) is loaded at once into shared memory and each thread's outputs of all
// splits into registers before the sums (in split order), so the loads are not one chain.
// At most ATTN_SPLITS splits (the launches always pass ATTN_SPLITS). Every thread calls it.
__device__ __forceinline__ void combine_head(const AttnCombineParams& p, int h) {
    __shared__ float s_pm[ATTN_SPLITS], s_pl[ATTN_SPLITS];
    const int splits = p.splits < ATTN_SPLITS ? p.splits : ATTN_SPLITS;
    const int stride = 2 + p.head_dim;
    const float* part = p.part + (size_t)h * p.splits * stride;
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        s_pm[s] = __ldcg(part + s * stride);
        s_pl[s] = __ldcg(part + s * stride + 1);
    }
    __syncthreads();
    float mx = NEG_INF;
    for (int s = 0; s < splits; ++s)
        if (s_pl[s] != 0.0f) mx = fmaxf(mx, s_pm[s]);
    for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
        float ov[ATTN_SPLITS];
#pragma unroll
        for (int s = 0; s < ATTN_SPLITS; ++s) ov[s] = s < splits ? __ldcg(part + s * stride + 2 + i) : 0.0f;
        float tot = 0.0f, o = 0.0f;
#pragma unroll
        for (int s = 0; s < ATTN_SPLITS; ++s) {
            if (s >= splits || s_pl[s] == 0.0f) continue;  // a split that saw no position
            const float f = expf(s_pm[s] - mx);
            tot = __fadd_rn(tot, __fmul_rn(s_pl[s], f));
            o = __fadd_rn(o, __fmul_rn(ov[s], f));
        }
        p.out[h * p.head_dim + i] = __fdiv_rn(o, tot);
    }
}

// One block per head.
extern "C" __global__ void __launch_bounds__(256) attention_combine(AttnCombineParams p) {
    combine_head(p, blockIdx.x);
}


// =======================================================================================
// Fused decode kernels (issue 26: fewer launches per token). Each is a product with the
// preparation of its input in the block's prologue (what `prep` did in a launch of its own),
// RoPE and the f16 cache write in the epilogue of the Q/K/V product, and the combine of the
// attention splits done by the last block of each head. Same arithmetic as the unfused
// kernels, operation for operation and sum for sum: the same logits, bit for bit.
// ---------------------------------------------------------------------------------------
#define FUSE_WARPS 8
#define PROLOGUE_REGS 8
#define PREFETCH_ROWS 4

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

// Ask L2 for the `bytes` bytes at `w` (one 128-byte line per lane and turn): the weight rows
// a warp will read, requested before the input's preparation so that their HBM latency
// overlaps it (and, with a dependent launch, the previous kernel). Changes no value.
__device__ __forceinline__ void prefetch_l2(const uint8_t* w, int bytes, int lane) {
    for (int o = lane * 128; o < bytes; o += 32 * 128)
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
// memory (all its loads in flight at once), then normalised in place; the RMSNorm sum of
// squares is summed in `prep`'s order: PREP_THREADS virtual threads (thread t adds values
// t, t + PREP_THREADS, ... in turn), each virtual warp's 32 sums by warp_sum, then the 32
// warp sums by warp_sum; the block's FUSE_WARPS warps play the 32 virtual ones (blocks of
// FUSE_WARPS warps only). The 8-bit blocks are `prep`'s arithmetic on the same values.
__device__ void prologue(const PrologueParams& p, unsigned char* smem, BlockQ8** q8,
                         BlockQ8K** q8k, float** x) {
    __shared__ float red[PREP_THREADS / 32];
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
        if (p.swiglu) v = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), p.in2[i]);
        sx[i] = v;
    }
    __syncthreads();
    if (p.norm) {
        // Warp w plays virtual warps w, w + FUSE_WARPS, ...; their warp_sum butterflies are
        // interleaved (independent chains), each the same additions as warp_sum.
        constexpr int VW = PREP_THREADS / 32 / FUSE_WARPS;
        float ss[VW];
#pragma unroll
        for (int k = 0; k < VW; ++k) {
            ss[k] = 0.0f;
            for (int i = (warp + k * FUSE_WARPS) * 32 + lane; i < p.n; i += PREP_THREADS)
                ss[k] = __fadd_rn(ss[k], __fmul_rn(sx[i], sx[i]));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
            for (int k = 0; k < VW; ++k) ss[k] += __shfl_xor_sync(0xffffffffu, ss[k], o);
        }
        if (lane == 0) {
#pragma unroll
            for (int k = 0; k < VW; ++k) red[warp + k * FUSE_WARPS] = ss[k];
        }
        __syncthreads();
        const float t = warp_sum(red[lane]);
        const float scale = __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(t, (float)p.n), p.eps)));
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
// + gridDim.x * FUSE_WARPS, ...; the row's dot product and epilogue (bias, residual
// accumulation) are `matvec`'s. Blocks of FUSE_WARPS warps; dynamic shared memory: the
// prologue's formats.
// ---------------------------------------------------------------------------------------
struct PrepMatVecParams {
    PrologueParams in;
    Proj p[3];
    int nproj;
    int rows_total;
};

extern "C" __global__ void __launch_bounds__(FUSE_WARPS * 32) prep_matvec(PrepMatVecParams p) {
    extern __shared__ __align__(16) unsigned char smem[];
    BlockQ8* q8;
    BlockQ8K* q8k;
    float* x;
    {
        const int lane = threadIdx.x % 32;
        int n = 0;
        for (int r0 = blockIdx.x * FUSE_WARPS + threadIdx.x / 32;
             r0 < p.rows_total && n < PREFETCH_ROWS; r0 += gridDim.x * FUSE_WARPS, ++n) {
            int r = r0, k = 0;
            while (k + 1 < p.nproj && r >= p.p[k].rows) {
                r -= p.p[k].rows;
                ++k;
            }
            prefetch_l2(p.p[k].w + (size_t)r * p.p[k].row_bytes, p.p[k].row_bytes, lane);
        }
    }
    dependency_wait();
    dependents_launch();
    prologue(p.in, smem, &q8, &q8k, &x);
    MatVecParams mp;
    mp.x = x;
    mp.q8 = q8;
    mp.q8k = q8k;
    mp.cols = p.in.n;
    const int lane = threadIdx.x % 32;
    for (int r0 = blockIdx.x * FUSE_WARPS + threadIdx.x / 32; r0 < p.rows_total;
         r0 += gridDim.x * FUSE_WARPS) {
        int r = r0, k = 0;
        while (k + 1 < p.nproj && r >= p.p[k].rows) {
            r -= p.p[k].rows;
            ++k;
        }
        const Proj& pr = p.p[k];
        const float dot = row_dot(mp, pr, pr.w + (size_t)r * pr.row_bytes, lane);
        if (lane == 0) {
            float v = dot;
            if (pr.bias) v = __fadd_rn(v, pr.bias[r]);
            pr.out[r] = pr.accumulate ? __fadd_rn(pr.out[r], v) : v;
        }
    }
}

// ---------------------------------------------------------------------------------------
// qkv_rope: the Q, K, V products of a layer with their input's preparation (RMSNorm and
// 8-bit blocks) in the prologue and `rope`'s epilogue: work item i is a rotated pair of Q
// (i < n_head * half: rows (h, j) and (h, j + half)), then a pair of K (rotated, written to
// K and, f16, to the cache at the state's position), then a row of V (written to V and the
// cache). One warp per item, as `prep_matvec`; the two rows of a pair are `matvec`'s dot
// products, the rotation and the f16 stores `rope`'s.
// ---------------------------------------------------------------------------------------
struct QkvRopeParams {
    PrologueParams in;
    Proj p[3];                // Q, K, V (rows n_head * head_dim, kv_dim, kv_dim)
    const float* inv_freq;    // [head_dim / 2]
    const DecodeState* state;
    uint16_t* kcache;         // [n_ctx, kv_dim] f16 of this layer
    uint16_t* vcache;
    int n_head;
    int n_kv;
    int head_dim;
    int items;                // (n_head + n_kv) * head_dim / 2 + n_kv * head_dim
};

extern "C" __global__ void __launch_bounds__(FUSE_WARPS * 32) qkv_rope(QkvRopeParams p) {
    extern __shared__ __align__(16) unsigned char smem[];
    BlockQ8* q8;
    BlockQ8K* q8k;
    float* x;
    const int lane = threadIdx.x % 32;
    const int half = p.head_dim / 2, kv_dim = p.n_kv * p.head_dim;
    const int q_pairs = p.n_head * half, k_pairs = p.n_kv * half;
    {
        int n = 0;
        for (int it = blockIdx.x * FUSE_WARPS + threadIdx.x / 32; it < p.items && n < PREFETCH_ROWS;
             it += gridDim.x * FUSE_WARPS, ++n) {
            if (it < q_pairs + k_pairs) {
                const bool is_k = it >= q_pairs;
                const int t = is_k ? it - q_pairs : it;
                const int ra = (t / half) * p.head_dim + t % half;
                const Proj& pr = is_k ? p.p[1] : p.p[0];
                prefetch_l2(pr.w + (size_t)ra * pr.row_bytes, pr.row_bytes, lane);
                prefetch_l2(pr.w + (size_t)(ra + half) * pr.row_bytes, pr.row_bytes, lane);
            } else {
                const Proj& pr = p.p[2];
                const int r = it - q_pairs - k_pairs;
                prefetch_l2(pr.w + (size_t)r * pr.row_bytes, pr.row_bytes, lane);
            }
        }
    }
    dependency_wait();
    dependents_launch();
    prologue(p.in, smem, &q8, &q8k, &x);
    MatVecParams mp;
    mp.x = x;
    mp.q8 = q8;
    mp.q8k = q8k;
    mp.cols = p.in.n;
    const uint32_t pos = p.state->pos;
    for (int it = blockIdx.x * FUSE_WARPS + threadIdx.x / 32; it < p.items;
         it += gridDim.x * FUSE_WARPS) {
        if (it < q_pairs + k_pairs) {
            const bool is_k = it >= q_pairs;
            const int t = is_k ? it - q_pairs : it;
            const int h = t / half, i = t % half;
            const int ra = h * p.head_dim + i, rb = ra + half;
            const Proj pr = is_k ? p.p[1] : p.p[0];
            const float da = row_dot(mp, pr, pr.w + (size_t)ra * pr.row_bytes, lane);
            const float db = row_dot(mp, pr, pr.w + (size_t)rb * pr.row_bytes, lane);
            if (lane == 0) {
                float a = da, b = db;
                if (pr.bias) {
                    a = __fadd_rn(a, pr.bias[ra]);
                    b = __fadd_rn(b, pr.bias[rb]);
                }
                const float ang = __fmul_rn((float)pos, p.inv_freq[i]);
                float s, c;
                sincosf(ang, &s, &c);
                const float na = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
                const float nb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
                pr.out[ra] = na;
                pr.out[rb] = nb;
                if (is_k) {
                    const size_t at = (size_t)pos * kv_dim;
                    p.kcache[at + ra] = f2h(na);
                    p.kcache[at + rb] = f2h(nb);
                }
            }
        } else {
            const int r = it - q_pairs - k_pairs;
            const Proj& pr = p.p[2];
            const float d = row_dot(mp, pr, pr.w + (size_t)r * pr.row_bytes, lane);
            if (lane == 0) {
                float v = d;
                if (pr.bias) v = __fadd_rn(v, pr.bias[r]);
                pr.out[r] = v;
                p.vcache[(size_t)pos * kv_dim + r] = f2h(v);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// attention_fused: `attention` + `attention_combine` in one launch. Each block writes its
// partial as `attention` does, then counts itself in arrived[head] (after a fence); the
// last block of a head combines the head's splits (`attention_combine`'s arithmetic, the
// splits in order) and resets the count to 0 for the next launch. `arrived` (n_head u32)
// is zeroed once at load.
// ---------------------------------------------------------------------------------------
struct AttnFusedParams {
    AttnParams a;
    float* out;           // [n_head * head_dim]
    uint32_t* arrived;    // [n_head]
};

extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention_fused(AttnFusedParams p) {
    __shared__ int s_last;
    dependency_wait();
    dependents_launch();
    attention_partial(p.a);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const uint32_t before = atomicAdd(p.arrived + blockIdx.x, 1u);
        s_last = before + 1 == (uint32_t)p.a.splits;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    AttnCombineParams c;
    c.part = p.a.part;
    c.out = p.out;
    c.head_dim = p.a.head_dim;
    c.splits = p.a.splits;
    combine_head(c, blockIdx.x);
    if (threadIdx.x == 0) p.arrived[blockIdx.x] = 0;
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
//     Top-k's threshold is found by a radix select on the 32-bit order key (4 passes of
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

// Block-wide helpers: every thread calls them; `red` holds SAMPLE_THREADS u64.
__device__ unsigned long long block_sum_u64(unsigned long long v, unsigned long long* red) {
    const int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        __syncthreads();
    }
    const unsigned long long r = red[0];
    __syncthreads();
    return r;
}

// Largest value, NaN ignored (fmaxf), as f32::max folds.
__device__ float block_max(float v, unsigned long long* red) {
    float* a = (float*)red;
    const int t = threadIdx.x;
    a[t] = v;
    __syncthreads();
    for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) a[t] = fmaxf(a[t], a[t + s]);
        __syncthreads();
    }
    const float r = a[0];
    __syncthreads();
    return r;
}

// Exclusive prefix sum over the threads (in thread order); *total gets the sum.
__device__ uint32_t block_scan(uint32_t v, unsigned long long* red, uint32_t* total) {
    uint32_t* a = (uint32_t*)red;
    uint32_t* b = a + SAMPLE_THREADS;
    const int t = threadIdx.x;
    a[t] = v;
    __syncthreads();
    for (int off = 1; off < SAMPLE_THREADS; off <<= 1) {
        const uint32_t x = t >= off ? a[t] + a[t - off] : a[t];
        b[t] = x;
        __syncthreads();
        uint32_t* tmp = a; a = b; b = tmp;
    }
    const uint32_t incl = a[t];
    *total = a[SAMPLE_THREADS - 1];
    __syncthreads();
    return incl - v;
}

// Sorts SAMPLE_POOL rank keys descending (by the whole key, or by its low 32 bits: id
// ascending); zeros (dead entries) go last. Called after a __syncthreads.
__device__ void pool_sort_desc(unsigned long long* a, int by_id) {
    const int t = threadIdx.x;
    for (int k = 2; k <= SAMPLE_POOL; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            const int o = t ^ j;
            if (o > t) {
                const unsigned long long x = a[t], y = a[o];
                const unsigned long long kx = by_id ? (x & 0xFFFFFFFFull) : x;
                const unsigned long long ky = by_id ? (y & 0xFFFFFFFFull) : y;
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
        for (int i = t; i < n; i += SAMPLE_THREADS) {
            const float l = logits[i];
            const uint32_t k = order_key(l);
            if ((k & mask) != prefix || rank_of(k, (uint32_t)i) < thr) continue;
            const uint32_t b = (k >> shift) & 255u;
            atomicAdd(&sh.hcount[b], 1u);
            if (by_mass) atomicAdd(&sh.hmass[b], mass_fx(l, mx));
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

// Copies the survivors, in ascending id, into pool[0..m) (m <= SAMPLE_POOL) and zeroes the
// rest of the pool. Returns m.
__device__ uint32_t pool_gather(const float* logits, int n, unsigned long long thr, int minp,
                                float min_logit, unsigned long long* pool, SampleShared& sh) {
    const int t = threadIdx.x;
    const int chunk = (n + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
    const int lo = min(n, t * chunk), hi = min(n, lo + chunk);
    uint32_t c = 0;
    for (int i = lo; i < hi; ++i)
        if (survives(logits[i], i, thr, minp, min_logit)) ++c;
    uint32_t m;
    uint32_t at = block_scan(c, sh.red, &m);
    pool[t] = 0;  // SAMPLE_POOL == SAMPLE_THREADS
    __syncthreads();
    for (int i = lo; i < hi && at < SAMPLE_POOL; ++i) {
        const float l = logits[i];
        if (survives(l, i, thr, minp, min_logit)) pool[at++] = rank_of(order_key(l), (uint32_t)i);
    }
    __syncthreads();
    return m < SAMPLE_POOL ? m : SAMPLE_POOL;
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
        // 2. Greedy (sample.rs argmax).
        float* rv = (float*)sh.red;
        int* ri = (int*)(rv + SAMPLE_THREADS);
        float best = NEG_INF;
        int at = 0x7fffffff;
        for (int i = t; i < n; i += SAMPLE_THREADS) {
            const float v = logits[i];
            if (v > best) { best = v; at = i; }
        }
        rv[t] = best;
        ri[t] = at;
        __syncthreads();
        for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
            if (t < s) {
                const float v2 = rv[t + s];
                const int i2 = ri[t + s];
                if (v2 > rv[t] || (v2 == rv[t] && i2 < ri[t])) { rv[t] = v2; ri[t] = i2; }
            }
            __syncthreads();
        }
        token = ri[0] == 0x7fffffff ? 0u : (uint32_t)ri[0];
        __syncthreads();
    } else {
        uint32_t ctr[4] = {pos + 1 - plen, 0u, c.request_lo, c.request_hi};
        philox4x32_10(ctr, c.seed_lo, c.seed_hi);
        const float u = (float)(ctr[0] >> 8) * (1.0f / 16777216.0f);
        unsigned long long* pool = sh.raw;
        float* pw = (float*)(sh.raw + SAMPLE_POOL);
        const bool topk = c.top_k > 0 && c.top_k < (uint32_t)n;
        const int minp = c.min_p > 0.0f;

        // 3. Top-k: the threshold rank of the k-th element.
        unsigned long long thr = 0;
        if (topk) {
            unsigned long long rest;
            uint32_t ties;
            const uint32_t key = radix_select(logits, n, 0, 0, 0.0f, c.top_k, &rest, &ties, sh);
            thr = rank_of(key, nth_tie(logits, n, key, 0, (uint32_t)rest, sh));
        }
        const uint32_t count = topk ? c.top_k : (uint32_t)n;
        if (count <= SAMPLE_POOL) {
            // The CPU's code on at most SAMPLE_POOL candidates.
            uint32_t m = pool_gather(logits, n, thr, 0, 0.0f, pool, sh);
            bool sorted = topk;
            if (topk) pool_sort_desc(pool, 0);
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
                    pool_sort_desc(pool, 0);
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
            pool_sort_desc(pool, 1);
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

// Four bytes at a 2-byte aligned address as one little-endian word.
__device__ __forceinline__ int ld32_2(const uint8_t* p) {
    return (int)((uint32_t)ld16(p) | ((uint32_t)ld16(p + 2) << 16));
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
    __shared__ float red[PREP_THREADS / 32];
    __shared__ float s_scale;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = in[i];
        if (swiglu) v = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), in2[i]);
        ss = __fadd_rn(ss, __fmul_rn(v, v));
        out[i] = v;
    }
    if (weight) {
        ss = warp_sum(ss);
        if (lane == 0) red[warp] = ss;
        __syncthreads();
        if (warp == 0) {
            float t = lane < nwarps ? red[lane] : 0.0f;
            t = warp_sum(t);
            if (lane == 0) s_scale = __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(t, (float)n), eps)));
        }
        __syncthreads();
        const float scale = s_scale;
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
// MM_WARPS), ceil(rows / tok_per_warp)); one warp per output row and tok_per_warp tokens, in
// groups of MM_TOK: each weight block is read once for the MM_TOK tokens of a group (from L1
// for the later groups), each token's sum formed exactly as `row_dot` (lane l takes blocks
// l, l + 32, ...; `warp_sum` at the end).
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
    int pad;
};

extern "C" __global__ void __launch_bounds__(MM_WARPS * 32) matmul_chunk(MatMulChunkParams p) {
    int lo, hi;
    if (!chunk_rows(p.state, p.chunk, p.last, &lo, &hi)) return;
    const int tw = lo + blockIdx.y * p.tok_per_warp;
    if (tw >= hi) return;
    const int tend = min(hi, tw + p.tok_per_warp);
    const int lane = threadIdx.x % 32;
    int r = blockIdx.x * MM_WARPS + threadIdx.x / 32;
    if (r >= p.rows_total) return;
    int k = 0;
    while (k + 1 < p.nproj && r >= p.p[k].rows) {
        r -= p.p[k].rows;
        ++k;
    }
    const ProjChunk& pr = p.p[k];
    const uint8_t* w = pr.w + (size_t)r * pr.row_bytes;
    for (int t0 = tw; t0 < tend; t0 += MM_TOK) {
    const int cnt = min(MM_TOK, tend - t0);
    float acc[MM_TOK];
#pragma unroll
    for (int j = 0; j < MM_TOK; ++j) acc[j] = 0.0f;
    switch (pr.type) {
        case T_F32:
        case T_F16:
        case T_BF16:
            for (int i = lane; i < p.cols; i += 32) {
                float wv;
                if (pr.type == T_F32) wv = ((const float*)w)[i];
                else if (pr.type == T_F16) wv = h2f(ld16(w + 2 * i));
                else wv = bf2f(ld16(w + 2 * i));
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j)
                    if (j < cnt)
                        acc[j] = __fadd_rn(acc[j], __fmul_rn(wv, p.x[(size_t)(t0 + j) * p.x_stride + i]));
            }
            break;
        case T_Q8_0:
        case T_Q4_0:
        case T_Q4_1: {
            const int bb = pr.type == T_Q8_0 ? 34 : (pr.type == T_Q4_0 ? 18 : 20);
            for (int b = lane; b < p.cols / QK; b += 32) {
                const uint8_t* blk = w + b * bb;
                const float dw = h2f(ld16(blk));
                int wq[8];
                if (pr.type == T_Q8_0) {
#pragma unroll
                    for (int e = 0; e < 8; ++e) wq[e] = ld32_2(blk + 2 + 4 * e);
                } else {
                    const uint8_t* qs = blk + (pr.type == T_Q4_0 ? 2 : 4);
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const uint32_t v = (uint32_t)ld32_2(qs + 4 * e);
                        uint32_t lo4 = v & 0x0F0F0F0Fu, hi4 = (v >> 4) & 0x0F0F0F0Fu;
                        if (pr.type == T_Q4_0) {
                            lo4 = __vsub4(lo4, 0x08080808u);
                            hi4 = __vsub4(hi4, 0x08080808u);
                        }
                        wq[e] = (int)lo4;
                        wq[4 + e] = (int)hi4;
                    }
                }
                const float mw = pr.type == T_Q4_1 ? h2f(ld16(blk + 2)) : 0.0f;
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) {
                    if (j >= cnt) break;
                    const BlockQ8& a = p.q8[(size_t)(t0 + j) * p.q8_stride + b];
                    const int* aq = (const int*)a.qs;
                    int s = 0;
#pragma unroll
                    for (int e = 0; e < 8; ++e) s = __dp4a(wq[e], aq[e], s);
                    const float t = __fmul_rn(__fmul_rn(dw, a.d), (float)s);
                    acc[j] = pr.type == T_Q4_1 ? __fadd_rn(acc[j], __fadd_rn(t, __fmul_rn(mw, a.s)))
                                               : __fadd_rn(acc[j], t);
                }
            }
            break;
        }
        case T_Q4_K:
            for (int b = lane; b < p.cols / QK_K; b += 32) {
                const uint8_t* blk = w + b * 144;
                int sumi[MM_TOK], summ[MM_TOK];
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) sumi[j] = summ[j] = 0;
                for (int sb = 0; sb < 8; ++sb) {
                    int sc, mn;
                    q4k_scale_min(blk + 4, sb, &sc, &mn);
                    const uint8_t* qs = blk + 16 + 32 * (sb / 2);
                    const int shift = 4 * (sb % 2);
                    int wq[8];
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        wq[e] = (int)(((uint32_t)ld32_2(qs + 4 * e) >> shift) & 0x0F0F0F0Fu);
#pragma unroll
                    for (int j = 0; j < MM_TOK; ++j) {
                        if (j >= cnt) break;
                        const BlockQ8K& a = p.q8k[(size_t)(t0 + j) * p.q8k_stride + b];
                        const int* aq = (const int*)(a.qs + 32 * sb);
                        int s = 0;
#pragma unroll
                        for (int e = 0; e < 8; ++e) s = __dp4a(wq[e], aq[e], s);
                        sumi[j] += sc * s;
                        summ[j] += mn * ((int)a.bsums[2 * sb] + (int)a.bsums[2 * sb + 1]);
                    }
                }
                const float d = h2f(ld16(blk)), dmin = h2f(ld16(blk + 2));
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) {
                    if (j >= cnt) break;
                    const float ad = p.q8k[(size_t)(t0 + j) * p.q8k_stride + b].d;
                    const float t1 = __fmul_rn(__fmul_rn(ad, d), (float)sumi[j]);
                    const float t2 = __fmul_rn(__fmul_rn(ad, dmin), (float)summ[j]);
                    acc[j] = __fadd_rn(acc[j], __fsub_rn(t1, t2));
                }
            }
            break;
        case T_Q6_K:
            for (int b = lane; b < p.cols / QK_K; b += 32) {
                const uint8_t* blk = w + b * 210;
                int sumi[MM_TOK];
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) sumi[j] = 0;
                for (int g = 0; g < 16; ++g) {
                    const int half = g / 8, kk = (g % 8) / 2, l0 = 16 * (g % 2);
                    const uint8_t* ql = blk + 64 * half + (kk & 1 ? 32 : 0) + l0;
                    const uint8_t* qh = blk + 128 + 32 * half + l0;
                    const int shift = kk >= 2 ? 4 : 0;
                    int wq[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const uint32_t lo4 = ((uint32_t)ld32_2(ql + 4 * e) >> shift) & 0x0F0F0F0Fu;
                        const uint32_t hi2 = (((uint32_t)ld32_2(qh + 4 * e) >> (2 * kk)) & 0x03030303u) << 4;
                        wq[e] = (int)__vsub4(lo4 | hi2, 0x20202020u);
                    }
                    const int sc = (int)(int8_t)blk[192 + g];
#pragma unroll
                    for (int j = 0; j < MM_TOK; ++j) {
                        if (j >= cnt) break;
                        const BlockQ8K& a = p.q8k[(size_t)(t0 + j) * p.q8k_stride + b];
                        const int* aq = (const int*)(a.qs + 16 * g);
                        int s = 0;
#pragma unroll
                        for (int e = 0; e < 4; ++e) s = __dp4a(wq[e], aq[e], s);
                        sumi[j] += sc * s;
                    }
                }
                const float d = h2f(ld16(blk + 208));
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) {
                    if (j >= cnt) break;
                    const float ad = p.q8k[(size_t)(t0 + j) * p.q8k_stride + b].d;
                    acc[j] = __fadd_rn(acc[j], __fmul_rn(__fmul_rn(ad, d), (float)sumi[j]));
                }
            }
            break;
        default:
#pragma unroll
            for (int j = 0; j < MM_TOK; ++j) acc[j] = __int_as_float(0x7fc00000);
            break;
    }
#pragma unroll
    for (int j = 0; j < MM_TOK; ++j) {
        if (j >= cnt) break;
        const float dot = warp_sum(acc[j]);
        if (lane == 0) {
            float v = dot;
            if (pr.bias) v = __fadd_rn(v, pr.bias[r]);
            float* o = pr.out + (size_t)(t0 + j) * pr.out_stride + r;
            *o = pr.accumulate ? __fadd_rn(*o, v) : v;
        }
    }
    }  // token groups
}

// ---------------------------------------------------------------------------------------
// matmul_chunk_staged (opt-in: TETHER_LLM_PREFILL_STAGED=1; NOT YET RUN ON A GPU):
// `matmul_chunk` for ggml block weights (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) and MM_TOK tokens per
// block, with the tokens' activation blocks copied into shared memory once per block (its 4
// rows share them) and the tokens' loads independent of each other (tokens past the chunk
// read zero blocks and are not stored). Each token's sum is formed as in `matmul_chunk`.
// Dynamic shared memory: MM_TOK * (cols / 32 * 40 [Q8 weights] + cols / 256 * 292 [K weights]).
// ---------------------------------------------------------------------------------------
__device__ __forceinline__ bool is_q8_type(int t) { return t == T_Q8_0 || t == T_Q4_0 || t == T_Q4_1; }

extern "C" __global__ void __launch_bounds__(MM_WARPS * 32) matmul_chunk_staged(MatMulChunkParams p) {
    extern __shared__ int s_act[];
    int lo, hi;
    if (!chunk_rows(p.state, p.chunk, p.last, &lo, &hi)) return;
    const int t0 = lo + blockIdx.y * MM_TOK;
    if (t0 >= hi) return;
    const int cnt = min(MM_TOK, hi - t0);
    bool need8 = false, need8k = false;
    for (int q = 0; q < p.nproj; ++q) {
        if (is_q8_type(p.p[q].type)) need8 = true;
        else need8k = true;
    }
    const int nb8 = p.cols / QK, nb8k = p.cols / QK_K;
    const int per8 = nb8 * (int)(sizeof(BlockQ8) / 4), per8k = nb8k * (int)(sizeof(BlockQ8K) / 4);
    int* s8 = s_act;
    int* s8k = s_act + (need8 ? MM_TOK * per8 : 0);
    if (need8)
        for (int i = threadIdx.x; i < MM_TOK * per8; i += blockDim.x) {
            const int j = i / per8, k = i % per8;
            s8[i] = j < cnt ? ((const int*)(p.q8 + (size_t)(t0 + j) * p.q8_stride))[k] : 0;
        }
    if (need8k)
        for (int i = threadIdx.x; i < MM_TOK * per8k; i += blockDim.x) {
            const int j = i / per8k, k = i % per8k;
            s8k[i] = j < cnt ? ((const int*)(p.q8k + (size_t)(t0 + j) * p.q8k_stride))[k] : 0;
        }
    __syncthreads();
    const BlockQ8* a8 = (const BlockQ8*)s8;
    const BlockQ8K* a8k = (const BlockQ8K*)s8k;
    const int lane = threadIdx.x % 32;
    int r = blockIdx.x * MM_WARPS + threadIdx.x / 32;
    if (r >= p.rows_total) return;
    int k = 0;
    while (k + 1 < p.nproj && r >= p.p[k].rows) {
        r -= p.p[k].rows;
        ++k;
    }
    const ProjChunk& pr = p.p[k];
    const uint8_t* w = pr.w + (size_t)r * pr.row_bytes;
    float acc[MM_TOK];
#pragma unroll
    for (int j = 0; j < MM_TOK; ++j) acc[j] = 0.0f;
    switch (pr.type) {
        case T_Q8_0:
        case T_Q4_0:
        case T_Q4_1: {
            const int bb = pr.type == T_Q8_0 ? 34 : (pr.type == T_Q4_0 ? 18 : 20);
            for (int b = lane; b < nb8; b += 32) {
                const uint8_t* blk = w + b * bb;
                const float dw = h2f(ld16(blk));
                int wq[8];
                if (pr.type == T_Q8_0) {
#pragma unroll
                    for (int e = 0; e < 8; ++e) wq[e] = ld32_2(blk + 2 + 4 * e);
                } else {
                    const uint8_t* qs = blk + (pr.type == T_Q4_0 ? 2 : 4);
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const uint32_t v = (uint32_t)ld32_2(qs + 4 * e);
                        uint32_t lo4 = v & 0x0F0F0F0Fu, hi4 = (v >> 4) & 0x0F0F0F0Fu;
                        if (pr.type == T_Q4_0) {
                            lo4 = __vsub4(lo4, 0x08080808u);
                            hi4 = __vsub4(hi4, 0x08080808u);
                        }
                        wq[e] = (int)lo4;
                        wq[4 + e] = (int)hi4;
                    }
                }
                const float mw = pr.type == T_Q4_1 ? h2f(ld16(blk + 2)) : 0.0f;
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) {
                    const BlockQ8& a = a8[j * nb8 + b];
                    const int* aq = (const int*)a.qs;
                    int s = 0;
#pragma unroll
                    for (int e = 0; e < 8; ++e) s = __dp4a(wq[e], aq[e], s);
                    const float t = __fmul_rn(__fmul_rn(dw, a.d), (float)s);
                    acc[j] = pr.type == T_Q4_1 ? __fadd_rn(acc[j], __fadd_rn(t, __fmul_rn(mw, a.s)))
                                               : __fadd_rn(acc[j], t);
                }
            }
            break;
        }
        case T_Q4_K:
            for (int b = lane; b < nb8k; b += 32) {
                const uint8_t* blk = w + b * 144;
                int sumi[MM_TOK], summ[MM_TOK];
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) sumi[j] = summ[j] = 0;
                for (int sb = 0; sb < 8; ++sb) {
                    int sc, mn;
                    q4k_scale_min(blk + 4, sb, &sc, &mn);
                    const uint8_t* qs = blk + 16 + 32 * (sb / 2);
                    const int shift = 4 * (sb % 2);
                    int wq[8];
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        wq[e] = (int)(((uint32_t)ld32_2(qs + 4 * e) >> shift) & 0x0F0F0F0Fu);
#pragma unroll
                    for (int j = 0; j < MM_TOK; ++j) {
                        const BlockQ8K& a = a8k[j * nb8k + b];
                        const int* aq = (const int*)(a.qs + 32 * sb);
                        int s = 0;
#pragma unroll
                        for (int e = 0; e < 8; ++e) s = __dp4a(wq[e], aq[e], s);
                        sumi[j] += sc * s;
                        summ[j] += mn * ((int)a.bsums[2 * sb] + (int)a.bsums[2 * sb + 1]);
                    }
                }
                const float d = h2f(ld16(blk)), dmin = h2f(ld16(blk + 2));
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) {
                    const float ad = a8k[j * nb8k + b].d;
                    const float t1 = __fmul_rn(__fmul_rn(ad, d), (float)sumi[j]);
                    const float t2 = __fmul_rn(__fmul_rn(ad, dmin), (float)summ[j]);
                    acc[j] = __fadd_rn(acc[j], __fsub_rn(t1, t2));
                }
            }
            break;
        case T_Q6_K:
            for (int b = lane; b < nb8k; b += 32) {
                const uint8_t* blk = w + b * 210;
                int sumi[MM_TOK];
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) sumi[j] = 0;
                for (int g = 0; g < 16; ++g) {
                    const int half = g / 8, kk = (g % 8) / 2, l0 = 16 * (g % 2);
                    const uint8_t* ql = blk + 64 * half + (kk & 1 ? 32 : 0) + l0;
                    const uint8_t* qh = blk + 128 + 32 * half + l0;
                    const int shift = kk >= 2 ? 4 : 0;
                    int wq[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const uint32_t lo4 = ((uint32_t)ld32_2(ql + 4 * e) >> shift) & 0x0F0F0F0Fu;
                        const uint32_t hi2 = (((uint32_t)ld32_2(qh + 4 * e) >> (2 * kk)) & 0x03030303u) << 4;
                        wq[e] = (int)__vsub4(lo4 | hi2, 0x20202020u);
                    }
                    const int sc = (int)(int8_t)blk[192 + g];
#pragma unroll
                    for (int j = 0; j < MM_TOK; ++j) {
                        const int* aq = (const int*)(a8k[j * nb8k + b].qs + 16 * g);
                        int s = 0;
#pragma unroll
                        for (int e = 0; e < 4; ++e) s = __dp4a(wq[e], aq[e], s);
                        sumi[j] += sc * s;
                    }
                }
                const float d = h2f(ld16(blk + 208));
#pragma unroll
                for (int j = 0; j < MM_TOK; ++j) {
                    const float ad = a8k[j * nb8k + b].d;
                    acc[j] = __fadd_rn(acc[j], __fmul_rn(__fmul_rn(ad, d), (float)sumi[j]));
                }
            }
            break;
        default:
#pragma unroll
            for (int j = 0; j < MM_TOK; ++j) acc[j] = __int_as_float(0x7fc00000);
            break;
    }
#pragma unroll
    for (int j = 0; j < MM_TOK; ++j) {
        const float dot = warp_sum(acc[j]);
        if (lane == 0 && j < cnt) {
            float v = dot;
            if (pr.bias) v = __fadd_rn(v, pr.bias[r]);
            float* o = pr.out + (size_t)(t0 + j) * pr.out_stride + r;
            *o = pr.accumulate ? __fadd_rn(*o, v) : v;
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
    float ss = 0.0f;
    for (int i = lane; i < p.head_dim; i += 32) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
    ss = warp_sum(ss);
    const float scale = __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(ss, (float)p.head_dim), p.eps)));
    for (int i = lane; i < p.head_dim; i += 32) x[i] = __fmul_rn(__fmul_rn(x[i], scale), p.weight[i]);
}

// ---------------------------------------------------------------------------------------
// rope_chunk: `rope` of row t at position start + t (with a cache: K and V of the row into
// the cache at that position). Grid (ceil(heads * head_dim / 2 / 128), chunk), 128 threads.
// ---------------------------------------------------------------------------------------
struct RopeChunkParams {
    float* x;
    const float* inv_freq;
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
    const float ang = __fmul_rn((float)pos, p.inv_freq[i]);
    float s, c;
    sincosf(ang, &s, &c);
    const float a = x[i], b = x[i + half];
    const float na = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    const float nb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    x[i] = na;
    x[i + half] = nb;
    if (p.kcache) {
        const float* v = p.v + (size_t)row * p.v_stride;
        const size_t at = (size_t)pos * p.kv_dim + h * p.head_dim;
        p.kcache[at + i] = f2h(na);
        p.kcache[at + i + half] = f2h(nb);
        p.vcache[at + i] = f2h(v[h * p.head_dim + i]);
        p.vcache[at + i + half] = f2h(v[h * p.head_dim + i + half]);
    }
}

// ---------------------------------------------------------------------------------------
// attention_chunk: `attention` of row t over cache positions 0 ..= start + t (causal).
// Grid (n_head, splits, chunk), ATTN_WARPS warps: the same warps take the same positions as
// in the decode step; a split that sees no position writes nothing (and
// attention_combine_chunk reads only the splits that saw one, as the decode step skips
// them).
// ---------------------------------------------------------------------------------------
struct AttnChunkParams {
    const float* q;
    const uint16_t* kcache;
    const uint16_t* vcache;
    float* part;  // [chunk, n_head, splits, 2 + head_dim]
    const DecodeState* state;
    int n_head;
    int n_kv;
    int head_dim;
    int kv_dim;
    float scale;
    int splits;
    int q_stride;  // floats per row of q
    int chunk;
};

extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention_chunk(AttnChunkParams p) {
    __shared__ float s_m[ATTN_WARPS], s_l[ATTN_WARPS];
    __shared__ float s_acc[ATTN_WARPS][MAX_HEAD_DIM];
    uint32_t start;
    const int n = chunk_tokens(p.state, p.chunk, &start);
    const int row = blockIdx.z;
    if (row >= n) return;
    const int len = (int)start + row + 1;
    const int split = blockIdx.y;
    if (split * ATTN_WARPS >= len) return;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int h = blockIdx.x;
    const int kvh = h / (p.n_head / p.n_kv);
    const int per = (p.head_dim + 31) / 32;
    const int stride = ATTN_WARPS * p.splits;
    const float* qrow = p.q + (size_t)row * p.q_stride;
    float q[MAX_HEAD_DIM / 32], acc[MAX_HEAD_DIM / 32];
#pragma unroll
    for (int j = 0; j < MAX_HEAD_DIM / 32; ++j) {
        const int i = lane + 32 * j;
        q[j] = (j < per && i < p.head_dim) ? qrow[h * p.head_dim + i] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (int t = split * ATTN_WARPS + warp; t < len; t += stride) {
        const uint16_t* k = p.kcache + (size_t)t * p.kv_dim + kvh * p.head_dim;
        const uint16_t* v = p.vcache + (size_t)t * p.kv_dim + kvh * p.head_dim;
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < MAX_HEAD_DIM / 32; ++j) {
            const int i = lane + 32 * j;
            if (j < per && i < p.head_dim) d = __fadd_rn(d, __fmul_rn(q[j], h2f(k[i])));
        }
        const float s = __fmul_rn(warp_sum(d), p.scale);
        const float mn = fmaxf(m, s);
        const float corr = expf(m - mn);
        const float e = expf(s - mn);
        l = __fadd_rn(__fmul_rn(l, corr), e);
#pragma unroll
        for (int j = 0; j < MAX_HEAD_DIM / 32; ++j) {
            const int i = lane + 32 * j;
            if (j < per && i < p.head_dim)
                acc[j] = __fadd_rn(__fmul_rn(acc[j], corr), __fmul_rn(e, h2f(v[i])));
        }
        m = mn;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < MAX_HEAD_DIM / 32; ++j) {
        const int i = lane + 32 * j;
        if (j < per && i < p.head_dim) s_acc[warp][i] = acc[j];
    }
    __syncthreads();
    float mx = NEG_INF;
    for (int w = 0; w < ATTN_WARPS; ++w)
        if (s_l[w] != 0.0f) mx = fmaxf(mx, s_m[w]);
    float* out = p.part + (((size_t)row * p.n_head + h) * p.splits + split) * (2 + p.head_dim);
    for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < ATTN_WARPS; ++w) {
            if (s_l[w] == 0.0f) continue;
            o = __fadd_rn(o, __fmul_rn(s_acc[w][i], expf(s_m[w] - mx)));
        }
        out[2 + i] = o;
    }
    if (threadIdx.x == 0) {
        float tot = 0.0f;
        for (int w = 0; w < ATTN_WARPS; ++w) {
            if (s_l[w] == 0.0f) continue;
            tot = __fadd_rn(tot, __fmul_rn(s_l[w], expf(s_m[w] - mx)));
        }
        out[0] = mx;
        out[1] = tot;
    }
}

struct AttnCombineChunkParams {
    const float* part;  // [chunk, n_head, splits, 2 + head_dim]
    float* out;         // [chunk, n_head * head_dim]
    const DecodeState* state;
    int n_head;
    int head_dim;
    int splits;
    int out_stride;  // floats per row of out
    int chunk;
    int pad;
};

// Grid (n_head, chunk), 256 threads: `attention_combine` of row t over the splits that saw
// a position (the first ceil(len / ATTN_WARPS)).
extern "C" __global__ void __launch_bounds__(256) attention_combine_chunk(AttnCombineChunkParams p) {
    uint32_t start;
    const int n = chunk_tokens(p.state, p.chunk, &start);
    const int row = blockIdx.y;
    if (row >= n) return;
    const int len = (int)start + row + 1;
    const int used = min(p.splits, (len + ATTN_WARPS - 1) / ATTN_WARPS);
    const int h = blockIdx.x;
    const float* part = p.part + ((size_t)row * p.n_head + h) * p.splits * (2 + p.head_dim);
    float mx = NEG_INF;
    for (int s = 0; s < used; ++s) {
        const float* ps = part + s * (2 + p.head_dim);
        if (ps[1] != 0.0f) mx = fmaxf(mx, ps[0]);
    }
    float* out = p.out + (size_t)row * p.out_stride;
    for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
        float tot = 0.0f, o = 0.0f;
        for (int s = 0; s < used; ++s) {
            const float* ps = part + s * (2 + p.head_dim);
            if (ps[1] == 0.0f) continue;
            const float f = expf(ps[0] - mx);
            tot = __fadd_rn(tot, __fmul_rn(ps[1], f));
            o = __fadd_rn(o, __fmul_rn(ps[2 + i], f));
        }
        out[h * p.head_dim + i] = __fdiv_rn(o, tot);
    }
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
