// Kernels of the request state of the runtime's sessions (runtime/src/session/state.rs).
//
// Shipped as PTX (state.ptx), JIT-compiled by the driver for whatever GPU loads it: ISA 8.0
// from NVRTC 12.0 for compute_75, so every CUDA 12 and 13 driver (JetPack 6 included) takes
// it and every supported GPU (sm_87, sm_90, sm_100, sm_110) runs it. Regenerate with
//   runtime/src/session/device/state-ptx.sh
// (NVRTC 12.0.76 from PyPI, no GPU needed).

// struct AppendRowsParams of runtime/src/session/device/append.rs.
struct AppendRowsParams {
    unsigned char* rows;       // [slots, capacity, row_bytes]
    const int* cursor;         // [slots, 2]: position, length
    const unsigned char* src;  // [slots, max_rows, row_bytes]
    unsigned long long row_bytes;
    int capacity;
    int max_rows;
};

// Slot blockIdx.y: rows [position, length) of the slot get the first length - position rows
// of the slot's block of src. The cursor is read here, from device memory, at every replay:
// one captured graph appends at every position. A cursor out of range (the host refuses such
// a run before launching it) writes nothing, never out of bounds. T is the copy unit: the
// host picks the widest one dividing row_bytes and every address.
template <typename T>
__device__ void append_rows(const AppendRowsParams& p) {
    const int slot = blockIdx.y;
    const int position = p.cursor[2 * slot];
    const int length = p.cursor[2 * slot + 1];
    if (position < 0 || length < position || length > p.capacity ||
        length - position > p.max_rows) {
        return;
    }
    const unsigned long long words =
        (unsigned long long)(length - position) * p.row_bytes / sizeof(T);
    T* dst = reinterpret_cast<T*>(
        p.rows + ((unsigned long long)slot * p.capacity + position) * p.row_bytes);
    const T* src = reinterpret_cast<const T*>(
        p.src + (unsigned long long)slot * p.max_rows * p.row_bytes);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < words; i += stride) {
        dst[i] = src[i];
    }
}

extern "C" __global__ void append_rows_u8(AppendRowsParams p) { append_rows<unsigned char>(p); }
extern "C" __global__ void append_rows_u32(AppendRowsParams p) { append_rows<unsigned int>(p); }
extern "C" __global__ void append_rows_u128(AppendRowsParams p) { append_rows<uint4>(p); }
