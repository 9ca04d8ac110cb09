// tether text-generation family: batch-1 decode kernels (issue 26).
//
// Built ahead of time by `runtime/kernels/build-kernels.sh families/llm/kernels/llm.cu` for
// sm_87, sm_90, sm_100 and sm_110 (CUDA 13 fatbin) and sm_87/90/100 (CUDA 12 cubins),
// embedded in the `tether-llm` crate (feature `cuda`, src/gpu/kernels.rs).
//
// `src/gpu/` lowers the forward pass's `Program` (src/forward.rs) to these kernels, one
// launch list per decode step, captured as ONE CUDA graph at load. Every kernel that depends
// on the position reads it from the request state (`DecodeState`) in device memory, so the
// same graph serves every position; the last kernel (`argmax_advance`) writes the chosen
// token id and advances the position on the device.
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
    uint32_t token;       // the last chosen token (argmax_advance), input of the next step
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

extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention(AttnParams p) {
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

struct AttnCombineParams {
    const float* part;  // [n_head, splits, 2 + head_dim]
    float* out;         // [n_head * head_dim]
    int head_dim;
    int splits;
};

// One block per head: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
extern "C" __global__ void __launch_bounds__(256) attention_combine(AttnCombineParams p) {
    const int h = blockIdx.x;
    const float* part = p.part + (size_t)h * p.splits * (2 + p.head_dim);
    float mx = NEG_INF;
    for (int s = 0; s < p.splits; ++s) {
        const float* ps = part + s * (2 + p.head_dim);
        if (ps[1] != 0.0f) mx = fmaxf(mx, ps[0]);
    }
    for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
        float tot = 0.0f, o = 0.0f;
        for (int s = 0; s < p.splits; ++s) {
            const float* ps = part + s * (2 + p.head_dim);
            if (ps[1] == 0.0f) continue;  // a split that saw no position
            const float f = expf(ps[0] - mx);
            tot = __fadd_rn(tot, __fmul_rn(ps[1], f));
            o = __fadd_rn(o, __fmul_rn(ps[2 + i], f));
        }
        p.out[h * p.head_dim + i] = __fdiv_rn(o, tot);
    }
}

// ---------------------------------------------------------------------------------------
// argmax_advance: greedy choice (largest logit, lowest id on a tie, NaN never wins) into
// state.token, then state.pos += 1. One block of 1024 threads; the last kernel of a step.
// ---------------------------------------------------------------------------------------
struct ArgmaxParams {
    const float* logits;
    DecodeState* state;
    int n;
    int pad;
};

extern "C" __global__ void __launch_bounds__(1024) argmax_advance(ArgmaxParams p) {
    __shared__ float s_v[32];
    __shared__ int s_i[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float best = NEG_INF;
    int at = 0x7fffffff;
    for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
        const float v = p.logits[i];
        if (v > best || (v == best && i < at)) { best = v; at = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, best, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (v2 > best || (v2 == best && i2 < at)) { best = v2; at = i2; }
    }
    if (lane == 0) { s_v[warp] = best; s_i[warp] = at; }
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x / 32;
        best = lane < nw ? s_v[lane] : NEG_INF;
        at = lane < nw ? s_i[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            const float v2 = __shfl_xor_sync(0xffffffffu, best, o);
            const int i2 = __shfl_xor_sync(0xffffffffu, at, o);
            if (v2 > best || (v2 == best && i2 < at)) { best = v2; at = i2; }
        }
        if (lane == 0) {
            p.state->token = at == 0x7fffffff ? 0u : (uint32_t)at;
            p.state->pos += 1;
        }
    }
}
