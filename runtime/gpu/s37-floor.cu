// Session 37: the floor of a decode step's kernel boundaries on this GPU. K = 150 dependent
// phases (one per fused launch of a 30-layer step), each a block-wide read of a 576-float
// vector written by the phase before, a reduction and a write, as (a) a graph of 150 kernels
// without and with programmatic dependent launch, (b) one persistent kernel with a grid
// barrier between phases (own sense-reversing barrier; cooperative groups grid.sync()).
// On the GPU host: nvcc -arch=sm_90 -O3 -o floor runtime/gpu/s37-floor.cu && ./floor
// (docs/evidence/h200-bench/s37-floor.log).
#include <cstdio>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define N 576
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ float work(const float* in, float* out, int blk, int nblk) {
  __shared__ float red[8];
  float s = 0.f;
  for (int i = threadIdx.x; i < N; i += blockDim.x) s += in[i];
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < blockDim.x / 32; ++w) t += red[w];
  __syncthreads();
  for (int i = blk * blockDim.x + threadIdx.x; i < N; i += nblk * blockDim.x) out[i] = in[i] * 0.5f + t * 1e-6f;
  return t;
}

__global__ void phase(const float* in, float* out, int pdl) {
#if __CUDA_ARCH__ >= 900
  if (pdl) { asm volatile("griddepcontrol.wait;" ::: "memory"); asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
#endif
  work(in, out, blockIdx.x, gridDim.x);
}

// Sense-reversing barrier: count and generation in global memory.
__device__ __forceinline__ void grid_barrier(unsigned* count, volatile unsigned* gen, unsigned nblk) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned g = *gen;
    __threadfence();
    if (atomicAdd(count, 1) == nblk - 1) { *count = 0; __threadfence(); atomicAdd((unsigned*)gen, 1); }
    else { while (*gen == g) { } }
    __threadfence();
  }
  __syncthreads();
}

__global__ void persistent(float* a, float* b, int k, unsigned* bar) {
  for (int i = 0; i < k; ++i) {
    const float* in = (i & 1) ? b : a; float* out = (i & 1) ? a : b;
    work(in, out, blockIdx.x, gridDim.x);
    grid_barrier(bar, bar + 32, gridDim.x);
  }
}

__global__ void persistent_cg(float* a, float* b, int k) {
  cg::grid_group g = cg::this_grid();
  for (int i = 0; i < k; ++i) {
    const float* in = (i & 1) ? b : a; float* out = (i & 1) ? a : b;
    work(in, out, blockIdx.x, gridDim.x);
    g.sync();
  }
}

int main() {
  const int K = 150, REP = 300;
  float *a, *b; unsigned* bar;
  CK(cudaMalloc(&a, 4096 * 4)); CK(cudaMalloc(&b, 4096 * 4)); CK(cudaMalloc(&bar, 256));
  CK(cudaMemset(a, 0, 4096 * 4)); CK(cudaMemset(b, 0, 4096 * 4)); CK(cudaMemset(bar, 0, 256));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  int grids[] = {9, 72, 132, 264, 396};
  for (int pdl = 0; pdl < 2; ++pdl)
    for (int gi = 0; gi < 5; ++gi) {
      int G = grids[gi];
      cudaGraph_t gr; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < K; ++i) {
        cudaLaunchConfig_t cfg = {}; cfg.gridDim = G; cfg.blockDim = 256; cfg.stream = s;
        cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at; cfg.numAttrs = pdl;
        const float* in = (i & 1) ? b : a; float* out = (i & 1) ? a : b;
        CK(cudaLaunchKernelEx(&cfg, phase, in, out, pdl));
      }
      CK(cudaStreamEndCapture(s, &gr)); CK(cudaGraphInstantiate(&ge, gr, 0));
      for (int w = 0; w < 20; ++w) cudaGraphLaunch(ge, s);
      CK(cudaStreamSynchronize(s));
      cudaEventRecord(e0, s);
      for (int r = 0; r < REP; ++r) cudaGraphLaunch(ge, s);
      cudaEventRecord(e1, s); CK(cudaEventSynchronize(e1));
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      printf("graph of %d kernels, grid %3d, pdl %d: %.3f us per kernel (%.1f us per graph)\n", K, G, pdl, ms * 1000 / REP / K, ms * 1000 / REP);
    }
  for (int v = 0; v < 2; ++v)
    for (int G : {66, 132, 264}) {
      cudaGraph_t gr; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      if (v == 0) persistent<<<G, 256, 0, s>>>(a, b, K, bar);
      else { void* args[] = {&a, &b, (void*)&K}; CK(cudaLaunchCooperativeKernel((void*)persistent_cg, G, 256, args, 0, s)); }
      CK(cudaGetLastError());
      CK(cudaStreamEndCapture(s, &gr)); CK(cudaGraphInstantiate(&ge, gr, 0));
      for (int w = 0; w < 20; ++w) cudaGraphLaunch(ge, s);
      CK(cudaStreamSynchronize(s));
      cudaEventRecord(e0, s);
      for (int r = 0; r < REP; ++r) cudaGraphLaunch(ge, s);
      cudaEventRecord(e1, s); CK(cudaEventSynchronize(e1));
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      printf("one %s kernel, grid %3d, %d phases: %.3f us per phase (%.1f us per launch)\n", v ? "cooperative (grid.sync)" : "persistent (own barrier)", G, K, ms * 1000 / REP / K, ms * 1000 / REP);
    }
  return 0;
}
