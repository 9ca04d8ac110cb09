// Issue 26, session 47: what a grid-wide barrier costs inside one persistent kernel, the
// premise of a decode step in one launch spread over every SM (a layer's phases separated
// by grid barriers instead of the layer kernel's 16-block cluster barriers).
//
// A cooperative launch of G blocks (one a SM: 100 KiB of dynamic shared memory each) runs K
// barriers of one kind; the time of K = 1,500 less that of K = 150, over 1,350, is one
// barrier (the launch's own cost cancels). Kinds:
//   atomic  thread 0 of each block: red.release.gpu add 1 to one counter, spin on
//           ld.acquire.gpu until it reaches the epoch's count;
//   flags   thread 0 of each block stores the epoch to its own flag (st.release.gpu); warp 0
//           polls every block's flag (ld.acquire.gpu, a lane per 32 blocks) until all reach it;
//   xchg    `flags` plus the exchange a decode phase needs: before the barrier each block
//           writes its share of a 576-float vector, after it every block reads the whole
//           vector (L2) into shared memory.
// Build: nvcc -arch=sm_90 -O3 -std=c++17 -o s47-grid runtime/gpu/s47-grid.cu
// Run:   ./s47-grid            (prints us a barrier for G = 16, 32, 64, 128 and every SM)
#include <cstdio>
#include <cuda_runtime.h>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));          \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

struct Args {
    unsigned* counter;  // [1]
    unsigned* flags;    // [G], padded to 32 bytes a block
    float* vec;         // [2][576]
    int kind, k;
    unsigned base;      // epochs already passed
};

__global__ void __launch_bounds__(256, 1) bar(Args a) {
    extern __shared__ float sm[];
    const unsigned G = gridDim.x;
    for (int i = 1; i <= a.k; ++i) {
        const unsigned epoch = a.base + (unsigned)i;
        if (a.kind == 2) {
            // this block's share of the vector (as a phase's rows would be)
            // (two copies by epoch parity: a block is at most one barrier ahead of another)
            const int per = (576 + G - 1) / G, r0 = blockIdx.x * per;
            for (int r = r0 + threadIdx.x; r < min(576, r0 + per); r += blockDim.x)
                a.vec[(epoch & 1) * 576 + r] = (float)(epoch + r);
        }
        __syncthreads();
        if (a.kind == 0) {
            if (threadIdx.x == 0) {
                red_release(a.counter, 1);
                while (ld_acquire(a.counter) < epoch * G) {
                }
            }
        } else {
            if (threadIdx.x == 0) st_release(a.flags + blockIdx.x * 8, epoch);
            if (threadIdx.x < 32) {
                for (;;) {
                    bool ok = true;
                    for (unsigned b = threadIdx.x; b < G; b += 32) ok &= ld_acquire(a.flags + b * 8) >= epoch;
                    if (__all_sync(0xffffffffu, ok)) break;
                }
            }
        }
        __syncthreads();
        if (a.kind == 2) {
            for (int r = threadIdx.x; r < 576; r += blockDim.x) sm[r] = __ldcg(a.vec + (epoch & 1) * 576 + r);
            __syncthreads();
            if (sm[threadIdx.x] != (float)(epoch + threadIdx.x)) asm volatile("trap;");
        }
    }
}

int main() {
    int dev = 0, sms = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("%s, %d SMs\n", prop.name, sms);
    const int smem = 100 * 1024;
    CK(cudaFuncSetAttribute(bar, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    unsigned *counter, *flags;
    float* vec;
    CK(cudaMalloc(&counter, 4));
    CK(cudaMalloc(&flags, 256 * 32));
    CK(cudaMalloc(&vec, 2 * 576 * 4));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const char* names[3] = {"atomic", "flags", "xchg"};
    const int grids[5] = {16, 32, 64, 128, sms};
    for (int kind = 0; kind < 3; ++kind) {
        for (int gi = 0; gi < 5; ++gi) {
            const int G = grids[gi];
            double ms[2];
            const int ks[2] = {150, 1500};
            for (int t = 0; t < 2; ++t) {
                CK(cudaMemset(counter, 0, 4));
                CK(cudaMemset(flags, 0, 256 * 32));
                unsigned base = 0;
                const int reps = 50;
                for (int r = -5; r < reps; ++r) {
                    if (r == 0) CK(cudaEventRecord(e0));
                    Args a = {counter, flags, vec, kind, ks[t], base};
                    void* args[] = {&a};
                    CK(cudaLaunchCooperativeKernel((void*)bar, dim3(G), dim3(256), args, smem, 0));
                    base += ks[t];
                }
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float f;
                CK(cudaEventElapsedTime(&f, e0, e1));
                ms[t] = f / reps;
            }
            printf("%-6s G=%3d  one launch of 150: %7.2f us  of 1500: %8.2f us  one barrier: %.3f us\n",
                   names[kind], G, ms[0] * 1e3, ms[1] * 1e3, (ms[1] - ms[0]) * 1e3 / 1350.0);
        }
    }
    return 0;
}
