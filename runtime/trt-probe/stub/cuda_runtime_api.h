// Stand-in for the CUDA runtime header, written for tether's ABI probe.
// The TensorRT headers only need the opaque handle types below; the probe
// never calls CUDA, so no CUDA toolkit is needed to compile it.
#pragma once
struct CUstream_st;
struct CUevent_st;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
