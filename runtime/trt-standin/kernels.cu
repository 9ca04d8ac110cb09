// The two kernels of tether's TensorRT STAND-IN library (not TensorRT; see README.md).
//
// The stand-in's `enqueueV3` runs the plan's op `y = a*x + b` as two launches through the
// execution context's workspace, like a real engine whose layers pass activations through
// the device memory given with `setDeviceMemoryV2`:
//   standin_scale: t[i] = a * x[i]   (t lives in the workspace, 256 bytes in), and thread 0
//                  writes the workspace header: [0] magic 'TSTD', [1] += 1 (run counter),
//                  [2] = n;
//   standin_shift: y[i] = t[i] + b.
// A wrong workspace, input or output address therefore shows up as a wrong result, a wrong
// header or a fault. `__fmul_rn` / `__fadd_rn` (and -fmad=false) keep the two roundings
// separate, so the result equals the host's `(a * x) + b` in f32 bit for bit.
//
// kernels.ptx is generated from this file by regen-ptx.sh (nvcc 13.0 from PyPI, then the
// PTX ISA and target lowered to 7.0 / sm_52 so any CUDA 11+ driver can JIT it for any GPU
// from Maxwell on; ptxas validates the result for sm_75, sm_87, sm_90 and sm_100).

extern "C" __global__ void standin_scale(
    float const* __restrict__ x, unsigned int* __restrict__ ws, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float* t = reinterpret_cast<float*>(ws + 64);
    if (i < n)
    {
        t[i] = __fmul_rn(a, x[i]);
    }
    if (i == 0)
    {
        ws[0] = 0x44545354u; // "TSTD" read as little-endian bytes
        atomicAdd(ws + 1, 1u);
        ws[2] = static_cast<unsigned int>(n);
    }
}

extern "C" __global__ void standin_shift(
    unsigned int const* __restrict__ ws, float* __restrict__ y, float b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float const* t = reinterpret_cast<float const*>(ws + 64);
    if (i < n)
    {
        y[i] = __fadd_rn(t[i], b);
    }
}
