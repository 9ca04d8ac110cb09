// tether detection family (YOLOv8 / Ultralytics head): GPU pre- and post-processing.
//
// Built ahead of time to cubins/fatbins by `build-kernels.sh` (this folder) for sm_87, sm_90,
// sm_100 and sm_110, and embedded in the `tether-detect` crate; see README.md here.
//
// Every kernel implements exactly the pipeline spec that the CPU path (families/detect/src)
// implements, operation for operation, so that the GPU and CPU results agree bit for bit on
// the preprocessed tensor and on the detections:
//   * all float arithmetic is written with the round-to-nearest intrinsics (__fadd_rn,
//     __fmul_rn, __fdiv_rn, ...), which the compiler never contracts into FMAs, so the
//     result does not depend on -fmad and equals what Rust computes (Rust never fuses);
//   * ordering is total and deterministic: candidates are sorted by (score desc, anchor asc),
//     whatever order the atomics compacted them in.
//
// Buffers (all device pointers, planned once in the session arena, see gpu.rs):
//   frame      u8  [H, pitch]             HWC, 1/3/4 bytes per pixel, row pitch in bytes
//   tensor     f32 [1, 3, in_h, in_w]     NCHW RGB in [0, 1]
//   raw        f32 [1, 4 + C, N]          network output: cx, cy, w, h, C class scores
//   box_by_anchor f32x4 [N], cls_by_anchor u32 [N], score_by_anchor f32 [N]
//   keys       u64 [MAX_CANDIDATES]       (orderable score << 32 | anchor), compacted
//   state      PostState                  counters, zeroed by a memset node each frame
//   sorted     f32x4 [MAX_CANDIDATES], sorted_cls u32 [..], sorted_score f32 [..]
//   mask       u64 [MAX_CANDIDATES][MAX_CANDIDATES / 64]  IoU > thr bitmask (j > i, same class)
//   out        DetectOutput (header + MAX_DET detections), device or mapped host memory
#ifdef __CUDACC_RTC__
typedef unsigned char uint8_t;  // NVRTC: no system headers needed
#else
#include <stdint.h>
#endif

#define MAX_CANDIDATES 4096
#define MASK_WORDS (MAX_CANDIDATES / 64)
#define MAX_DET_CAP 300
#define SORT_THREADS 1024
#define NMS_BATCH 16

struct PostState {
    unsigned int count;      // candidates above the score threshold (may exceed capacity)
    unsigned int pad[3];
};

struct GpuDetection {       // 24 bytes, mirrors `GpuDetection` in gpu.rs
    float x1, y1, x2, y2;   // original-image pixels, clamped to [0, W] x [0, H]
    float score;
    unsigned int class_id;
};

struct DetectOutput {       // mirrors `DetectOutput` in gpu.rs
    unsigned int count;      // detections written (<= max_det)
    unsigned int candidates; // candidates above the score threshold, before capping
    unsigned int overflow;   // 1 when candidates > MAX_CANDIDATES (lowest-priority dropped)
    unsigned int magic;      // 0x7e7de7ec once written: detects a graph that never ran
    GpuDetection det[MAX_DET_CAP];
};

// ---------------------------------------------------------------------------------------
// Preprocessing: letterbox with bilinear resize (half-pixel centres), pad, normalise, NCHW.
// Mirrors letterbox.rs `Preprocessor::run`: for output channel c the source byte is
// `offs[c]` within a pixel of `ch` bytes (RGB8 0,1,2; BGR8 2,1,0; RGBA8 0,1,2; GRAY8 0,0,0),
// value = ((1-fy)*((1-fx)*p00 + fx*p01) + fy*((1-fx)*p10 + fx*p11) - mean[c]) / std[c].
// One thread per output pixel, three channels each.
// ---------------------------------------------------------------------------------------
struct PreParams {
    int src_w, src_h, pitch, ch;   // source geometry: pixels, pixels, bytes per row, bytes/px
    int off0, off1, off2;          // byte offset of R, G, B within a pixel
    int in_w, in_h;                // network input
    int new_w, new_h, left, top;   // letterbox geometry (Letterbox::new)
    float sx, sy;                  // src_w / new_w, src_h / new_h (f32 division)
    float mean0, mean1, mean2;
    float std0, std1, std2;
    float pad;                     // pad value (114), before normalisation
};

extern "C" __global__ void __launch_bounds__(256)
letterbox_bilinear_nchw(const uint8_t* __restrict__ frame, float* __restrict__ tensor,
                        PreParams p) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= p.in_w || y >= p.in_h) return;
    const size_t plane = (size_t)p.in_w * (size_t)p.in_h;
    const size_t o = (size_t)y * p.in_w + x;
    const int xs = x - p.left, ys = y - p.top;
    float v[3];
    if (xs < 0 || ys < 0 || xs >= p.new_w || ys >= p.new_h) {
        v[0] = v[1] = v[2] = p.pad;
    } else {
        float src_x = __fsub_rn(__fmul_rn(__fadd_rn((float)xs, 0.5f), p.sx), 0.5f);
        float src_y = __fsub_rn(__fmul_rn(__fadd_rn((float)ys, 0.5f), p.sy), 0.5f);
        src_x = fmaxf(src_x, 0.0f);
        src_y = fmaxf(src_y, 0.0f);
        const int x0 = min((int)floorf(src_x), p.src_w - 1);
        const int y0 = min((int)floorf(src_y), p.src_h - 1);
        const int x1 = min(x0 + 1, p.src_w - 1);
        const int y1 = min(y0 + 1, p.src_h - 1);
        const float fx = __fsub_rn(src_x, (float)x0);
        const float fy = __fsub_rn(src_y, (float)y0);
        const float gx = __fsub_rn(1.0f, fx), gy = __fsub_rn(1.0f, fy);
        const uint8_t* r0 = frame + (size_t)y0 * p.pitch;
        const uint8_t* r1 = frame + (size_t)y1 * p.pitch;
        const int a = x0 * p.ch, b = x1 * p.ch;
        const int offs[3] = {p.off0, p.off1, p.off2};
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            const float p00 = (float)r0[a + offs[c]], p01 = (float)r0[b + offs[c]];
            const float p10 = (float)r1[a + offs[c]], p11 = (float)r1[b + offs[c]];
            const float t = __fadd_rn(__fmul_rn(gx, p00), __fmul_rn(fx, p01));
            const float u = __fadd_rn(__fmul_rn(gx, p10), __fmul_rn(fx, p11));
            v[c] = __fadd_rn(__fmul_rn(gy, t), __fmul_rn(fy, u));
        }
    }
    tensor[o] = __fdiv_rn(__fsub_rn(v[0], p.mean0), p.std0);
    tensor[plane + o] = __fdiv_rn(__fsub_rn(v[1], p.mean1), p.std1);
    tensor[2 * plane + o] = __fdiv_rn(__fsub_rn(v[2], p.mean2), p.std2);
}

// ---------------------------------------------------------------------------------------
// Postprocessing 1/4: decode. One thread per anchor: first argmax over the class rows,
// strict score threshold, box corners in network pixels; compact a sort key per candidate.
// ---------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned int orderable(float f) {
    unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // monotonic in f
}

extern "C" __global__ void __launch_bounds__(256)
decode_candidates(const float* __restrict__ raw, int num_classes, int num_anchors,
                  float score_thr, float4* __restrict__ box_by_anchor,
                  unsigned int* __restrict__ cls_by_anchor, float* __restrict__ score_by_anchor,
                  unsigned long long* __restrict__ keys, PostState* __restrict__ state) {
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= num_anchors) return;
    const size_t n = (size_t)num_anchors;
    float best = raw[4 * n + a];
    unsigned int cls = 0;
    for (int c = 1; c < num_classes; ++c) {
        float v = raw[(size_t)(4 + c) * n + a];
        if (v > best) { best = v; cls = (unsigned int)c; }
    }
    if (!(best > score_thr)) return;
    const float cx = raw[a], cy = raw[n + a], w = raw[2 * n + a], h = raw[3 * n + a];
    const float hw = __fdiv_rn(w, 2.0f), hh = __fdiv_rn(h, 2.0f);
    box_by_anchor[a] = make_float4(__fsub_rn(cx, hw), __fsub_rn(cy, hh), __fadd_rn(cx, hw),
                                   __fadd_rn(cy, hh));
    cls_by_anchor[a] = cls;
    score_by_anchor[a] = best;
    const unsigned int slot = atomicAdd(&state->count, 1u);
    if (slot < MAX_CANDIDATES) {
        // Ascending key order == score descending, then anchor ascending.
        keys[slot] = ((unsigned long long)(~orderable(best)) << 32) | (unsigned int)a;
    }
}

// ---------------------------------------------------------------------------------------
// Postprocessing 2/4: sort. One block: bitonic sort of the first min(count, MAX_CANDIDATES)
// keys in shared memory (padded to the next power of two), then gather the sorted boxes.
// On overflow the kept subset is whichever MAX_CANDIDATES candidates won the atomics; the
// output says so (DetectOutput.overflow), it is never silent.
// ---------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(SORT_THREADS)
sort_candidates(const unsigned long long* __restrict__ keys,
                const float4* __restrict__ box_by_anchor,
                const unsigned int* __restrict__ cls_by_anchor,
                const float* __restrict__ score_by_anchor, const PostState* __restrict__ state,
                float4* __restrict__ sorted_box, unsigned int* __restrict__ sorted_cls,
                float* __restrict__ sorted_score) {
    __shared__ unsigned long long sk[MAX_CANDIDATES];
    const unsigned int n = min(state->count, (unsigned int)MAX_CANDIDATES);
    unsigned int p = 1;
    while (p < n) p <<= 1;
    for (unsigned int i = threadIdx.x; i < p; i += blockDim.x)
        sk[i] = (i < n) ? keys[i] : 0xFFFFFFFFFFFFFFFFull;
    __syncthreads();
    for (unsigned int k = 2; k <= p; k <<= 1) {
        for (unsigned int j = k >> 1; j > 0; j >>= 1) {
            for (unsigned int i = threadIdx.x; i < p; i += blockDim.x) {
                unsigned int l = i ^ j;
                if (l > i) {
                    unsigned long long a = sk[i], b = sk[l];
                    bool up = (i & k) == 0;
                    if ((a > b) == up) { sk[i] = b; sk[l] = a; }
                }
            }
            __syncthreads();
        }
    }
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
        unsigned int a = (unsigned int)(sk[i] & 0xFFFFFFFFull);
        sorted_box[i] = box_by_anchor[a];
        sorted_cls[i] = cls_by_anchor[a];
        sorted_score[i] = score_by_anchor[a];
    }
}

// ---------------------------------------------------------------------------------------
// Postprocessing 3/4: IoU bitmask. Block (bx, by) of 64 threads: row i = by*64 + t against
// the 64 columns of word bx; bit j set when j > i, same class and IoU(i, j) > iou_thr.
// Launched over the full MAX_CANDIDATES grid (graph-friendly); blocks past `n` exit.
// ---------------------------------------------------------------------------------------
__device__ __forceinline__ float iou(float4 a, float4 b) {
    float iw = fmaxf(__fsub_rn(fminf(a.z, b.z), fmaxf(a.x, b.x)), 0.0f);
    float ih = fmaxf(__fsub_rn(fminf(a.w, b.w), fmaxf(a.y, b.y)), 0.0f);
    float inter = __fmul_rn(iw, ih);
    // area() = max(x2 - x1, 0) * max(y2 - y1, 0), as decode.rs BoundingBox::area
    float area_a = __fmul_rn(fmaxf(__fsub_rn(a.z, a.x), 0.0f), fmaxf(__fsub_rn(a.w, a.y), 0.0f));
    float area_b = __fmul_rn(fmaxf(__fsub_rn(b.z, b.x), 0.0f), fmaxf(__fsub_rn(b.w, b.y), 0.0f));
    float den = __fsub_rn(__fadd_rn(area_a, area_b), inter);
    return den > 0.0f ? __fdiv_rn(inter, den) : 0.0f;
}

extern "C" __global__ void __launch_bounds__(64)
nms_mask(const float4* __restrict__ sorted_box, const unsigned int* __restrict__ sorted_cls,
         const PostState* __restrict__ state, float iou_thr,
         unsigned long long* __restrict__ mask) {
    const unsigned int n = min(state->count, (unsigned int)MAX_CANDIDATES);
    const unsigned int row_block = blockIdx.y, col_block = blockIdx.x;
    if (row_block * 64 >= n || col_block * 64 >= n || col_block < row_block) return;
    __shared__ float4 cb[64];
    __shared__ unsigned int cc[64];
    const unsigned int t = threadIdx.x;
    const unsigned int cj = col_block * 64 + t;
    if (cj < n) { cb[t] = sorted_box[cj]; cc[t] = sorted_cls[cj]; }
    __syncthreads();
    const unsigned int i = row_block * 64 + t;
    if (i >= n) return;
    const float4 bi = sorted_box[i];
    const unsigned int ci = sorted_cls[i];
    const unsigned int cols = min(64u, n - col_block * 64);
    unsigned long long bits = 0;
    for (unsigned int k = 0; k < cols; ++k) {
        unsigned int j = col_block * 64 + k;
        if (j > i && cc[k] == ci && iou(bi, cb[k]) > iou_thr) bits |= 1ull << k;
    }
    mask[(size_t)i * MASK_WORDS + col_block] = bits;
}

// ---------------------------------------------------------------------------------------
// Postprocessing 4/4: greedy reduction (one warp) and mapping back to the original image.
// Walks candidates in sorted order; a candidate is kept unless an earlier *kept* candidate
// suppressed it (exactly the CPU's greedy loop); stops at max_det.
// ---------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(32)
nms_reduce(const float4* __restrict__ sorted_box, const unsigned int* __restrict__ sorted_cls,
           const float* __restrict__ sorted_score, const PostState* __restrict__ state,
           const unsigned long long* __restrict__ mask, int max_det, float ratio, float left,
           float top, float src_w, float src_h, DetectOutput* __restrict__ out) {
    const unsigned int lane = threadIdx.x;
    const unsigned int total = state->count;
    const unsigned int n = min(total, (unsigned int)MAX_CANDIDATES);
    const unsigned int cap = (unsigned int)min(max_det, MAX_DET_CAP);
    // removed bits: word w lives in lane (w % 32), slot (w / 32); MASK_WORDS == 64 -> 2 slots
    unsigned long long removed[2] = {0ull, 0ull};
    unsigned int kept = 0;
    // Rows are loaded NMS_BATCH candidates ahead of the decisions that need them: a load
    // does not depend on whether its candidate is kept, so a batch of loads is in flight at
    // once instead of one dependent L2 round trip per kept candidate.
    for (unsigned int base = 0; base < n && kept < cap; base += NMS_BATCH) {
        unsigned long long ra[NMS_BATCH], rb[NMS_BATCH];
#pragma unroll
        for (int k = 0; k < NMS_BATCH; ++k) {
            const unsigned int i = base + (unsigned int)k;
            const unsigned long long* row = mask + (size_t)i * MASK_WORDS;
            const unsigned int w = i >> 6;  // words before i's word hold only j <= i: unused
            ra[k] = (i < n && lane >= w && lane * 64 < n) ? row[lane] : 0ull;
            rb[k] = (i < n && lane + 32 >= w && (lane + 32) * 64 < n) ? row[lane + 32] : 0ull;
        }
        // Decide the batch (uniform across the warp), remembering which were kept.
        const unsigned int kept_before = kept;
        unsigned int kept_bits = 0;
#pragma unroll
        for (int k = 0; k < NMS_BATCH; ++k) {
            const unsigned int i = base + (unsigned int)k;
            if (i >= n || kept >= cap) break;
            const unsigned int w = i >> 6;
            const unsigned long long mine = (w < 32) ? removed[0] : removed[1];
            const unsigned long long word = __shfl_sync(0xFFFFFFFFu, mine, w % 32);
            if ((word >> (i & 63)) & 1ull) continue;
            kept_bits |= 1u << k;
            ++kept;
            removed[0] |= ra[k];
            removed[1] |= rb[k];
        }
        // Write the batch's kept detections in parallel: lane k handles candidate base + k.
        if (lane < NMS_BATCH && ((kept_bits >> lane) & 1u)) {
            const unsigned int i = base + lane;
            const unsigned int slot = kept_before + __popc(kept_bits & ((1u << lane) - 1u));
            const float4 b = sorted_box[i];
            // Map back from network pixels as Letterbox::to_source: f32 (x - left) / (r as f32)
            const float x1 = __fdiv_rn(__fsub_rn(b.x, left), ratio);
            const float y1 = __fdiv_rn(__fsub_rn(b.y, top), ratio);
            const float x2 = __fdiv_rn(__fsub_rn(b.z, left), ratio);
            const float y2 = __fdiv_rn(__fsub_rn(b.w, top), ratio);
            GpuDetection d;
            d.x1 = fminf(fmaxf(x1, 0.0f), src_w);
            d.y1 = fminf(fmaxf(y1, 0.0f), src_h);
            d.x2 = fminf(fmaxf(x2, 0.0f), src_w);
            d.y2 = fminf(fmaxf(y2, 0.0f), src_h);
            d.score = sorted_score[i];
            d.class_id = sorted_cls[i];
            out->det[slot] = d;
        }
    }
    if (lane == 0) {
        out->count = kept;
        out->candidates = total;
        out->overflow = total > MAX_CANDIDATES ? 1u : 0u;
        out->magic = 0x7e7de7ecu;
    }
}

// A tiny kernel for tests of the device layer (graph capture, launch overhead).
extern "C" __global__ void add_one_u32(unsigned int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1u;
}
