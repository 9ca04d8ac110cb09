// tether native GPU engine: the kernel library for everything cuDNN and cuBLAS do not do.
//
// Built ahead of time by build-kernels.sh (this folder) into bin/: a CUDA 13 fatbin with SASS
// for sm_87, sm_90, sm_100, sm_110 plus PTX, and CUDA 12.9 cubins for sm_87/90/100 (JetPack 6
// and 12.x data-center drivers). No headers: it compiles with nvcc and with NVRTC alike.
//
// Every kernel takes ONE parameter, a struct passed by value, mirrored field for field by a
// #[repr(C)] struct in runtime/src/native/kernels.rs (sizes checked by tests there). Change
// both together. The host reference of every kernel is runtime/src/native/reference.rs and
// program.rs: same formulas, fp32 arithmetic.
//
// Element types (enum dtype, = ElemType in ir.rs): 0 f32, 1 f16, 2 i32, 3 i64, 4 u8, 5 i8,
// 6 bool. Loads convert to fp32 (integers round to nearest); stores convert from fp32 (floats
// round to nearest even, integers truncate toward zero and saturate, NaN -> 0, bool = v != 0).

#define MAX_RANK 8
#define EW_MAX_INPUTS 8
#define EW_MAX_NODES 32

// ---------------------------------------------------------------------------------------------
// Loads and stores of every element type, through fp32.

__device__ __forceinline__ float half_to_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short float_to_half(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float load_as_float(unsigned long long base, long long index,
                                               unsigned int dtype) {
    switch (dtype) {
    case 0: return ((const float*)base)[index];
    case 1: return half_to_float(((const unsigned short*)base)[index]);
    case 2: return (float)((const int*)base)[index];
    case 3: return (float)((const long long*)base)[index];
    case 4: return (float)((const unsigned char*)base)[index];
    case 5: return (float)((const signed char*)base)[index];
    default: return ((const unsigned char*)base)[index] != 0 ? 1.0f : 0.0f;
    }
}

__device__ __forceinline__ void store_from_float(unsigned long long base, long long index,
                                                 unsigned int dtype, float v) {
    switch (dtype) {
    case 0: ((float*)base)[index] = v; break;
    case 1: ((unsigned short*)base)[index] = float_to_half(v); break;
    case 2: {
        int r;
        asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(r) : "f"(v));  // saturating, NaN -> 0
        ((int*)base)[index] = r;
        break;
    }
    case 3: {
        long long r;
        asm("cvt.rzi.s64.f32 %0, %1;" : "=l"(r) : "f"(v));
        ((long long*)base)[index] = r;
        break;
    }
    case 4: {
        unsigned int r;
        asm("cvt.rzi.u32.f32 %0, %1;" : "=r"(r) : "f"(v));
        ((unsigned char*)base)[index] = (unsigned char)(r > 255u ? 255u : r);
        break;
    }
    case 5: {
        int r;
        asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(r) : "f"(v));
        r = r > 127 ? 127 : (r < -128 ? -128 : r);
        ((signed char*)base)[index] = (signed char)r;
        break;
    }
    default: ((unsigned char*)base)[index] = v != 0.0f ? 1 : 0; break;
    }
}

// ---------------------------------------------------------------------------------------------
// Element-wise programs (program.rs): out[i] = program(in0[i], in1[i], ...).

enum ew_op {
    OP_INPUT = 0,   // r = input[a]
    OP_ADD = 1, OP_SUB = 2, OP_MUL = 3, OP_DIV = 4, OP_MIN = 5, OP_MAX = 6, OP_POW = 7,
    OP_NEG = 10, OP_ABS = 11, OP_EXP = 12, OP_LN = 13, OP_SQRT = 14, OP_RSQRT = 15,
    OP_RECIP = 16, OP_SIGMOID = 17, OP_TANH = 18, OP_ERF = 19, OP_SILU = 20, OP_FLOOR = 21,
    OP_CEIL = 22, OP_ROUND = 23, OP_ROUND_EVEN = 24, OP_SIN = 25, OP_COS = 26, OP_SQUARE = 27,
    OP_SIGN = 28, OP_LEAKY_RELU = 30, OP_HARD_SWISH = 31, OP_GELU_EXACT = 32, OP_GELU_TANH = 33,
    OP_EQ = 40, OP_NE = 41, OP_LT = 42, OP_LE = 43, OP_GT = 44, OP_GE = 45, OP_AND = 46,
    OP_OR = 47, OP_XOR = 48, OP_NOT = 49, OP_SELECT = 50, OP_IS_NAN = 51, OP_IS_INF = 52,
    OP_IMM = 254,   // r = imm
};

struct ew_operand {                 // 48 bytes
    unsigned long long ptr;         // element [0, 0, ...] of the view
    int strides[MAX_RANK];          // elements, per dimension of the (collapsed) shape
    unsigned int dtype;
    unsigned int pad;
};

struct ew_node {                    // 8 bytes
    unsigned char op, a, b, c;      // op: enum ew_op; a: input slot or node; b, c: nodes
    float imm;
};

struct ew_params {                  // 752 bytes
    unsigned int n;                 // elements
    unsigned int rank;              // of the collapsed shape, >= 1
    unsigned int n_inputs;
    unsigned int n_nodes;
    unsigned int packed;            // 1: every operand is packed over shape (offset = i)
    unsigned int pad[3];
    unsigned int shape[MAX_RANK];
    struct ew_operand out;
    struct ew_operand in[EW_MAX_INPUTS];
    struct ew_node nodes[EW_MAX_NODES];
};
static_assert(sizeof(struct ew_operand) == 48, "kernels.rs EwOperand");
static_assert(sizeof(struct ew_node) == 8, "kernels.rs EwNode");
static_assert(sizeof(struct ew_params) == 752, "kernels.rs EwParams");

__device__ __forceinline__ float truth(float v) { return v != 0.0f ? 1.0f : 0.0f; }

__device__ __forceinline__ float apply(unsigned int op, float a, float b, float c, float imm) {
    switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_MIN: return fminf(a, b);
    case OP_MAX: return fmaxf(a, b);
    case OP_POW: return powf(a, b);
    case OP_NEG: return -a;
    case OP_ABS: return fabsf(a);
    case OP_EXP: return expf(a);
    case OP_LN: return logf(a);
    case OP_SQRT: return sqrtf(a);
    case OP_RSQRT: return 1.0f / sqrtf(a);
    case OP_RECIP: return 1.0f / a;
    case OP_SIGMOID: return 1.0f / (1.0f + expf(-a));
    case OP_TANH: return tanhf(a);
    case OP_ERF: return erff(a);
    case OP_SILU: return a * (1.0f / (1.0f + expf(-a)));
    case OP_FLOOR: return floorf(a);
    case OP_CEIL: return ceilf(a);
    case OP_ROUND: return roundf(a);
    case OP_ROUND_EVEN: return rintf(a);
    case OP_SIN: return sinf(a);
    case OP_COS: return cosf(a);
    case OP_SQUARE: return a * a;
    case OP_SIGN: return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : 0.0f);
    case OP_LEAKY_RELU: return a >= 0.0f ? a : imm * a;
    case OP_HARD_SWISH: return a * fminf(fmaxf(a / 6.0f + 0.5f, 0.0f), 1.0f);
    case OP_GELU_EXACT: return (a * 0.5f) * (erff(a * 0.70710678118654752f) + 1.0f);
    case OP_GELU_TANH: return 0.5f * a * (1.0f + tanhf(0.79788456080286536f * (a + 0.044715f * powf(a, imm))));
    case OP_EQ: return a == b ? 1.0f : 0.0f;
    case OP_NE: return a != b ? 1.0f : 0.0f;
    case OP_LT: return a < b ? 1.0f : 0.0f;
    case OP_LE: return a <= b ? 1.0f : 0.0f;
    case OP_GT: return a > b ? 1.0f : 0.0f;
    case OP_GE: return a >= b ? 1.0f : 0.0f;
    case OP_AND: return truth(a) * truth(b);
    case OP_OR: return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f;
    case OP_XOR: return truth(a) != truth(b) ? 1.0f : 0.0f;
    case OP_NOT: return a == 0.0f ? 1.0f : 0.0f;
    case OP_SELECT: return a != 0.0f ? b : c;
    case OP_IS_NAN: return a != a ? 1.0f : 0.0f;
    case OP_IS_INF: {
        const unsigned int bits = (unsigned int)imm;
        const float inf = __int_as_float(0x7f800000);
        return ((a == inf && (bits & 1u)) || (a == -inf && (bits & 2u))) ? 1.0f : 0.0f;
    }
    default: return __int_as_float(0x7fc00000);  // unknown op: NaN, never silently plausible
    }
}

extern "C" __global__ void __launch_bounds__(256) ew_program(const __grid_constant__ struct ew_params p) {
    const unsigned int stride = gridDim.x * blockDim.x;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) {
        long long off_out = i;
        long long off_in[EW_MAX_INPUTS];
#pragma unroll
        for (int k = 0; k < EW_MAX_INPUTS; ++k) off_in[k] = i;
        if (!p.packed) {
            off_out = 0;
#pragma unroll
            for (int k = 0; k < EW_MAX_INPUTS; ++k) off_in[k] = 0;
            unsigned int rem = i;
            for (int d = (int)p.rank - 1; d >= 0; --d) {
                const unsigned int dim = p.shape[d];
                const unsigned int q = rem / dim;
                const long long c = (long long)(rem - q * dim);
                rem = q;
                off_out += c * p.out.strides[d];
#pragma unroll
                for (int k = 0; k < EW_MAX_INPUTS; ++k)
                    if (k < (int)p.n_inputs) off_in[k] += c * p.in[k].strides[d];
            }
        }
        float r[EW_MAX_NODES];
        for (unsigned int j = 0; j < p.n_nodes; ++j) {
            const struct ew_node nd = p.nodes[j];
            float v;
            if (nd.op == OP_INPUT) {
                long long o = 0;
#pragma unroll
                for (int k = 0; k < EW_MAX_INPUTS; ++k)
                    if (k == nd.a) o = off_in[k];
                v = load_as_float(p.in[nd.a].ptr, o, p.in[nd.a].dtype);
            } else if (nd.op == OP_IMM) {
                v = nd.imm;
            } else {
                v = apply(nd.op, r[nd.a], r[nd.b], r[nd.c], nd.imm);
            }
            r[j] = v;
        }
        store_from_float(p.out.ptr, off_out, p.out.dtype, r[p.n_nodes - 1]);
    }
}

// ---------------------------------------------------------------------------------------------
// A convolution's epilogue: y = act(x [+ b[c]]) [+ r] over [outer, C, inner] views whose
// inner axes are packed (x, r, y may each have their own channel and outer strides: a slice of
// channels, a slot of a concatenation), b one value per channel. launch.rs picks it instead of
// ew_program for exactly the programs `act(x + b)`, `act(x + b) + r` (act: 0 none, 1 SiLU,
// 2 sigmoid; the YOLO/ResNet residual block) and `x` alone (a cast or copy): the same fp32
// formulas as apply() and the same loads and stores, so the same results, without
// interpreting the program or decomposing every operand's index per element.

struct bias_act_params {            // 96 bytes
    unsigned long long x, b, r, y;  // element 0 of each (b, r: 0 when absent)
    unsigned int n;                 // elements: outer * C * inner
    unsigned int inner;             // elements per channel plane (product of the axes after C)
    unsigned int channels;          // C
    unsigned int act;               // 0 none, 1 SiLU, 2 sigmoid
    unsigned int x_dtype, b_dtype, r_dtype, y_dtype;
    unsigned int x_cs, x_os;        // channel and outer strides of x, elements
    unsigned int r_cs, r_os;        // of r
    unsigned int y_cs, y_os;        // of y
    unsigned int flags;             // 1: add b, 2: add r, 4: four elements per thread
    unsigned int pad;
};
static_assert(sizeof(struct bias_act_params) == 96, "kernels.rs BiasActParams");

// Four consecutive elements of an fp32 or fp16 operand in one 16- or 8-byte access (index a
// multiple of 4, base aligned: bias_act_params checks both); other types element by element.
__device__ __forceinline__ void load4(unsigned long long base, long long index, unsigned int dtype,
                                      float v[4]) {
    if (dtype == 1) {
        const uint2 u = *(const uint2*)((const unsigned short*)base + index);
        v[0] = half_to_float((unsigned short)(u.x & 0xffffu));
        v[1] = half_to_float((unsigned short)(u.x >> 16));
        v[2] = half_to_float((unsigned short)(u.y & 0xffffu));
        v[3] = half_to_float((unsigned short)(u.y >> 16));
    } else if (dtype == 0) {
        const float4 f = *(const float4*)((const float*)base + index);
        v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
    } else {
        for (int k = 0; k < 4; ++k) v[k] = load_as_float(base, index + k, dtype);
    }
}

__device__ __forceinline__ void store4(unsigned long long base, long long index, unsigned int dtype,
                                       const float v[4]) {
    if (dtype == 1) {
        uint2 u;
        u.x = (unsigned int)float_to_half(v[0]) | ((unsigned int)float_to_half(v[1]) << 16);
        u.y = (unsigned int)float_to_half(v[2]) | ((unsigned int)float_to_half(v[3]) << 16);
        *(uint2*)((unsigned short*)base + index) = u;
    } else if (dtype == 0) {
        *(float4*)((float*)base + index) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        for (int k = 0; k < 4; ++k) store_from_float(base, index + k, dtype, v[k]);
    }
}

__device__ __forceinline__ float bias_act_one(const struct bias_act_params& p, float a, unsigned int c) {
    if (p.flags & 1u) a = a + load_as_float(p.b, c, p.b_dtype);
    if (p.act == 1) {
        a = a * (1.0f / (1.0f + expf(-a)));
    } else if (p.act == 2) {
        a = 1.0f / (1.0f + expf(-a));
    }
    return a;
}

extern "C" __global__ void __launch_bounds__(256) bias_act(const __grid_constant__ struct bias_act_params p) {
    const unsigned int stride = gridDim.x * blockDim.x;
    if (p.flags & 4u) {
        // Four consecutive elements per thread, along j (inner % 4 == 0: one channel) or
        // along c (inner == 1, unit channel strides): the same arithmetic as below.
        for (unsigned int q = blockIdx.x * blockDim.x + threadIdx.x; q < (p.n >> 2); q += stride) {
            const unsigned int i = q << 2;
            const unsigned int j = i % p.inner;
            const unsigned int t = i / p.inner;
            const unsigned int c = t % p.channels;
            const unsigned int o = t / p.channels;
            float a[4];
            load4(p.x, (long long)o * p.x_os + (long long)c * p.x_cs + j, p.x_dtype, a);
            for (int k = 0; k < 4; ++k) a[k] = bias_act_one(p, a[k], p.inner == 1 ? c + k : c);
            if (p.flags & 2u) {
                float r[4];
                load4(p.r, (long long)o * p.r_os + (long long)c * p.r_cs + j, p.r_dtype, r);
                for (int k = 0; k < 4; ++k) a[k] = r[k] + a[k];
            }
            store4(p.y, (long long)o * p.y_os + (long long)c * p.y_cs + j, p.y_dtype, a);
        }
        return;
    }
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) {
        const unsigned int j = i % p.inner;
        const unsigned int t = i / p.inner;
        const unsigned int c = t % p.channels;
        const unsigned int o = t / p.channels;
        float a = load_as_float(p.x, (long long)o * p.x_os + (long long)c * p.x_cs + j, p.x_dtype);
        a = bias_act_one(p, a, c);
        if (p.flags & 2u)
            a = load_as_float(p.r, (long long)o * p.r_os + (long long)c * p.r_cs + j, p.r_dtype) + a;
        store_from_float(p.y, (long long)o * p.y_os + (long long)c * p.y_cs + j, p.y_dtype, a);
    }
}

// ---------------------------------------------------------------------------------------------
// Strided copy of raw elements (1, 2, 4 or 8 bytes): transposes, slices, concatenation
// pieces, broadcasts. Packed-to-packed copies go through cuMemcpyDtoDAsync instead.

struct copy_params {                // 128 bytes
    unsigned int n;
    unsigned int rank;
    unsigned int elem_bytes;
    unsigned int pad;
    unsigned int shape[MAX_RANK];
    unsigned long long src, dst;
    int src_strides[MAX_RANK];
    int dst_strides[MAX_RANK];
};
static_assert(sizeof(struct copy_params) == 128, "kernels.rs CopyParams");

// Source and destination offsets (elements) of linear index `rem` over `p.shape` (rank
// `p.rank`, innermost last), for copy_params and transpose_params alike.
template <typename P>
__device__ __forceinline__ void src_dst_offsets(const P& p, unsigned int rem, long long& s, long long& d) {
    s = 0;
    d = 0;
    for (int k = (int)p.rank - 1; k >= 0; --k) {
        const unsigned int dim = p.shape[k];
        const unsigned int q = rem / dim;
        const long long c = (long long)(rem - q * dim);
        rem = q;
        s += c * p.src_strides[k];
        d += c * p.dst_strides[k];
    }
}

template <typename T>
__device__ __forceinline__ void copy_body(const struct copy_params& p) {
    const unsigned int stride = gridDim.x * blockDim.x;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) {
        long long s, d;
        src_dst_offsets(p, i, s, d);
        ((T*)p.dst)[d] = ((const T*)p.src)[s];
    }
}

extern "C" __global__ void __launch_bounds__(256) strided_copy(const __grid_constant__ struct copy_params p) {
    switch (p.elem_bytes) {
    case 1: copy_body<unsigned char>(p); break;
    case 2: copy_body<unsigned short>(p); break;
    case 4: copy_body<unsigned int>(p); break;
    default: copy_body<unsigned long long>(p); break;
    }
}

// ---------------------------------------------------------------------------------------------
// Tiled transposing copy of raw elements: dimension `a` is contiguous in the source (stride 1),
// dimension `b` contiguous in the destination (stride 1); every other dimension (`outer` in
// all, at most MAX_RANK) is walked by blockIdx.z. A 32x32 tile goes through shared memory so
// that both the reads (along a) and the writes (along b) are coalesced: NCHW <-> NHWC around
// the channels-last convolutions (layout.rs). Block (32, 8); grid (tiles of b, tiles of a,
// min(outer, 65535)). The classic shared-memory transpose (a padded tile against bank
// conflicts), as in NVIDIA's "An Efficient Matrix Transpose in CUDA C/C++".

struct transpose_params {           // 144 bytes
    unsigned long long src, dst;
    unsigned int rows;              // length of a
    unsigned int cols;              // length of b
    int src_b_stride;               // source stride along b (along a: 1)
    int dst_a_stride;               // destination stride along a (along b: 1)
    unsigned int outer;             // product of the other dimensions
    unsigned int rank;              // number of other dimensions
    unsigned int elem_bytes;        // 1, 2, 4, 8
    unsigned int pad;
    unsigned int shape[MAX_RANK];   // the other dimensions (at most MAX_RANK - 2)
    int src_strides[MAX_RANK];
    int dst_strides[MAX_RANK];
};
static_assert(sizeof(struct transpose_params) == 144, "kernels.rs TransposeParams");

template <typename T>
__device__ __forceinline__ void transpose_body(const struct transpose_params& p, T (*tile)[33]) {
    const unsigned int a0 = blockIdx.y * 32, b0 = blockIdx.x * 32;
    for (unsigned int o = blockIdx.z; o < p.outer; o += gridDim.z) {
        long long so, d0;
        src_dst_offsets(p, o, so, d0);
        const T* src = (const T*)p.src + so;
        T* dst = (T*)p.dst + d0;
        for (unsigned int j = threadIdx.y; j < 32; j += 8) {
            const unsigned int a = a0 + threadIdx.x, b = b0 + j;
            if (a < p.rows && b < p.cols) tile[j][threadIdx.x] = src[a + (long long)b * p.src_b_stride];
        }
        __syncthreads();
        for (unsigned int j = threadIdx.y; j < 32; j += 8) {
            const unsigned int b = b0 + threadIdx.x, a = a0 + j;
            if (a < p.rows && b < p.cols) dst[b + (long long)a * p.dst_a_stride] = tile[threadIdx.x][j];
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(256) tiled_transpose(const __grid_constant__ struct transpose_params p) {
    __shared__ unsigned long long tile[32][33];
    switch (p.elem_bytes) {
    case 1: transpose_body<unsigned char>(p, (unsigned char (*)[33])tile); break;
    case 2: transpose_body<unsigned short>(p, (unsigned short (*)[33])tile); break;
    case 4: transpose_body<unsigned int>(p, (unsigned int (*)[33])tile); break;
    default: transpose_body<unsigned long long>(p, tile); break;
    }
}

// ---------------------------------------------------------------------------------------------
// Softmax over the middle axis of packed [outer, n, inner] (ir::Softmax), fp32 arithmetic:
// max, sum of exp(x - max), then exp(x - max) / sum (or x - max - log(sum)).

struct softmax_params {             // 40 bytes
    unsigned long long x, y;
    unsigned int outer, n, inner;
    unsigned int dtype;             // of x and y
    unsigned int log;
    unsigned int pad;
};
static_assert(sizeof(struct softmax_params) == 40, "kernels.rs SoftmaxParams");

// inner == 1: one warp per row of n contiguous elements.
extern "C" __global__ void __launch_bounds__(256) softmax_rows(const __grid_constant__ struct softmax_params p) {
    const unsigned int lane = threadIdx.x & 31;
    const unsigned int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= p.outer) return;
    const long long base = (long long)row * p.n;
    float m = -__int_as_float(0x7f800000);
    for (unsigned int k = lane; k < p.n; k += 32) m = fmaxf(m, load_as_float(p.x, base + k, p.dtype));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.0f;
    for (unsigned int k = lane; k < p.n; k += 32) s += expf(load_as_float(p.x, base + k, p.dtype) - m);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float ls = logf(s);
    for (unsigned int k = lane; k < p.n; k += 32) {
        const float v = load_as_float(p.x, base + k, p.dtype) - m;
        store_from_float(p.y, base + k, p.dtype, p.log ? v - ls : expf(v) / s);
    }
}

// inner > 1: one thread per (outer, inner) column, looping over n (coalesced over inner).
extern "C" __global__ void __launch_bounds__(256) softmax_cols(const __grid_constant__ struct softmax_params p) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= p.outer * p.inner) return;
    const unsigned int o = t / p.inner, i = t - o * p.inner;
    const long long base = (long long)o * p.n * p.inner + i;
    float m = -__int_as_float(0x7f800000);
    for (unsigned int k = 0; k < p.n; ++k) m = fmaxf(m, load_as_float(p.x, base + (long long)k * p.inner, p.dtype));
    float s = 0.0f;
    for (unsigned int k = 0; k < p.n; ++k) s += expf(load_as_float(p.x, base + (long long)k * p.inner, p.dtype) - m);
    const float ls = logf(s);
    for (unsigned int k = 0; k < p.n; ++k) {
        const long long at = base + (long long)k * p.inner;
        const float v = load_as_float(p.x, at, p.dtype) - m;
        store_from_float(p.y, at, p.dtype, p.log ? v - ls : expf(v) / s);
    }
}

// ---------------------------------------------------------------------------------------------
// Reduction over the middle axis of packed [outer, n, inner] into packed [outer, inner]
// (ir::Reduce), fp32 accumulation.

struct reduce_params {              // 40 bytes
    unsigned long long x, y;
    unsigned int outer, n, inner;
    unsigned int kind;              // 0 sum, 1 mean of squares, 2 max, 3 min, 4 prod
    unsigned int dtype;
    unsigned int pad;
};
static_assert(sizeof(struct reduce_params) == 40, "kernels.rs ReduceParams");

__device__ __forceinline__ float reduce_init(unsigned int kind) {
    return kind == 2 ? -__int_as_float(0x7f800000)
         : kind == 3 ? __int_as_float(0x7f800000)
         : kind == 4 ? 1.0f : 0.0f;
}

__device__ __forceinline__ float reduce_step(unsigned int kind, float acc, float v) {
    switch (kind) {
    case 2: return fmaxf(acc, v);
    case 3: return fminf(acc, v);
    case 4: return acc * v;
    case 1: return acc + v * v;
    default: return acc + v;
    }
}

__device__ __forceinline__ float reduce_merge(unsigned int kind, float a, float b) {
    switch (kind) {
    case 2: return fmaxf(a, b);
    case 3: return fminf(a, b);
    case 4: return a * b;
    default: return a + b;
    }
}

extern "C" __global__ void __launch_bounds__(256) reduce_rows(const __grid_constant__ struct reduce_params p) {
    const unsigned int lane = threadIdx.x & 31;
    const unsigned int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= p.outer) return;
    const long long base = (long long)row * p.n;
    float acc = reduce_init(p.kind);
    for (unsigned int k = lane; k < p.n; k += 32) acc = reduce_step(p.kind, acc, load_as_float(p.x, base + k, p.dtype));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc = reduce_merge(p.kind, acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if (lane == 0) store_from_float(p.y, row, p.dtype, p.kind == 1 ? acc / (float)p.n : acc);
}

extern "C" __global__ void __launch_bounds__(256) reduce_cols(const __grid_constant__ struct reduce_params p) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= p.outer * p.inner) return;
    const unsigned int o = t / p.inner, i = t - o * p.inner;
    const long long base = (long long)o * p.n * p.inner + i;
    float acc = reduce_init(p.kind);
    for (unsigned int k = 0; k < p.n; ++k) acc = reduce_step(p.kind, acc, load_as_float(p.x, base + (long long)k * p.inner, p.dtype));
    store_from_float(p.y, t, p.dtype, p.kind == 1 ? acc / (float)p.n : acc);
}

// ---------------------------------------------------------------------------------------------
// Gather along one axis (ir::Gather): y[o, k, i] = data[o, idx[k], i], raw elements. An index
// out of range is clamped (the host rejects such constant indices at load).

struct gather_params {              // 48 bytes
    unsigned long long data, indices, y;
    unsigned int outer, n, inner, count;
    unsigned int elem_bytes;
    unsigned int index_bytes;       // 4 (i32) or 8 (i64)
};
static_assert(sizeof(struct gather_params) == 48, "kernels.rs GatherParams");

template <typename T>
__device__ __forceinline__ void gather_body(const struct gather_params& p) {
    const unsigned int total = p.outer * p.count * p.inner;
    const unsigned int stride = gridDim.x * blockDim.x;
    for (unsigned int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const unsigned int i = t % p.inner;
        const unsigned int k = (t / p.inner) % p.count;
        const unsigned int o = t / (p.inner * p.count);
        long long ix = p.index_bytes == 8 ? ((const long long*)p.indices)[k]
                                          : (long long)((const int*)p.indices)[k];
        if (ix < 0) ix += p.n;
        ix = ix < 0 ? 0 : (ix >= (long long)p.n ? (long long)p.n - 1 : ix);
        ((T*)p.y)[t] = ((const T*)p.data)[((long long)o * p.n + ix) * p.inner + i];
    }
}

extern "C" __global__ void __launch_bounds__(256) gather(const __grid_constant__ struct gather_params p) {
    switch (p.elem_bytes) {
    case 1: gather_body<unsigned char>(p); break;
    case 2: gather_body<unsigned short>(p); break;
    case 4: gather_body<unsigned int>(p); break;
    default: gather_body<unsigned long long>(p); break;
    }
}

// ---------------------------------------------------------------------------------------------
// In-place row update at a device-held position (ops::update::UpdateRows, a KV cache append):
// dst[o, pos + r, i] = src[o, r, i] with pos = cursor[2 * slot], read when the kernel runs, so
// one captured graph writes the right rows at every position. A row outside [0, capacity) is
// skipped: never a write outside dst.

struct update_rows_params {         // 48 bytes
    unsigned long long dst, src, cursor;
    unsigned int outer, capacity, rows, inner;
    unsigned int elem_bytes;
    unsigned int slot;
};
static_assert(sizeof(struct update_rows_params) == 48, "update.rs UpdateRowsParams");

template <typename T>
__device__ __forceinline__ void update_rows_body(const struct update_rows_params& p) {
    const long long pos = (long long)((const int*)p.cursor)[2 * p.slot];
    const unsigned int total = p.outer * p.rows * p.inner;
    const unsigned int stride = gridDim.x * blockDim.x;
    for (unsigned int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const unsigned int i = t % p.inner;
        const unsigned int r = (t / p.inner) % p.rows;
        const unsigned int o = t / (p.inner * p.rows);
        const long long at = pos + r;
        if (at < 0 || at >= (long long)p.capacity) continue;
        ((T*)p.dst)[((long long)o * p.capacity + at) * p.inner + i] = ((const T*)p.src)[t];
    }
}

extern "C" __global__ void __launch_bounds__(256) update_rows(const __grid_constant__ struct update_rows_params p) {
    switch (p.elem_bytes) {
    case 1: update_rows_body<unsigned char>(p); break;
    case 2: update_rows_body<unsigned short>(p); break;
    case 4: update_rows_body<unsigned int>(p); break;
    default: update_rows_body<unsigned long long>(p); break;
    }
}

// ---------------------------------------------------------------------------------------------
// Separable resampling of the last two axes (ir::Resize): tract's per-axis plans as tables,
// rows first then columns, zero-weight taps skipped, exactly tract's order of operations.

struct resize_params {              // 88 bytes
    unsigned long long x, y;
    unsigned long long iy, wy;      // i32 / f32 [h_out * win_h]
    unsigned long long ix, wx;      // i32 / f32 [w_out * win_w]
    unsigned int outer, h_in, w_in, h_out, w_out, win_h, win_w;
    unsigned int x_dtype, y_dtype;
    unsigned int pad;
};
static_assert(sizeof(struct resize_params) == 88, "kernels.rs ResizeParams");

extern "C" __global__ void __launch_bounds__(256) resize2d(const __grid_constant__ struct resize_params p) {
    const unsigned int total = p.outer * p.h_out * p.w_out;
    const unsigned int stride = gridDim.x * blockDim.x;
    const int* iy = (const int*)p.iy;
    const float* wy = (const float*)p.wy;
    const int* ix = (const int*)p.ix;
    const float* wx = (const float*)p.wx;
    for (unsigned int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const unsigned int col = t % p.w_out;
        const unsigned int row = (t / p.w_out) % p.h_out;
        const unsigned int o = t / (p.w_out * p.h_out);
        const long long plane = (long long)o * p.h_in * p.w_in;
        float acc = 0.0f;
        for (unsigned int b = 0; b < p.win_w; ++b) {
            const float wb = wx[col * p.win_w + b];
            if (wb == 0.0f) continue;
            const int c = ix[col * p.win_w + b];
            float s = 0.0f;
            for (unsigned int a = 0; a < p.win_h; ++a) {
                const float wa = wy[row * p.win_h + a];
                if (wa == 0.0f) continue;
                const int r = iy[row * p.win_h + a];
                s += wa * load_as_float(p.x, plane + (long long)r * p.w_in + c, p.x_dtype);
            }
            acc += wb * s;
        }
        store_from_float(p.y, t, p.y_dtype, acc);
    }
}
