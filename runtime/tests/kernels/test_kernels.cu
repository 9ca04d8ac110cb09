// Test kernels of the device-layer tests (runtime/tests/cuda_device.rs), shipped as PTX so the
// driver JIT-compiles them for whatever GPU runs the tests. Regenerate with
//   nvcc -ptx -arch=compute_75 -o test_kernels.ptx test_kernels.cu
// (nvcc 13.0 from PyPI: nvidia-cuda-nvcc==13.0.88).
struct AddOneParams {
    unsigned int* p;
    int n;
    int pad;
};

extern "C" __global__ void add_one_u32(AddOneParams a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) a.p[i] += 1u;
}
