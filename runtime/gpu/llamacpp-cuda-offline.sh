#!/usr/bin/env bash
# llama.cpp's llama-bench with CUDA 13.0 for sm_90 (the H200), built on a machine with no GPU
# and no CUDA install (the development VM), so that the device call only unpacks and runs it
# (`llamacpp-cuda.sh prebuilt`) instead of spending 206-246 s of device time compiling it there (sessions 34-36)
# (`llamacpp-cuda.sh build`). Same source and cmake options as `llamacpp-cuda.sh build`, plus:
#   - the CUDA toolkit is assembled from NVIDIA's pip wheels (nvcc 13.0.88, cuBLAS 13.0.0.19 =
#     CUDA 13.0 GA, CCCL 13.0.85), and the driver library is a link-time stub exporting the 11
#     driver-API symbols ggml-cuda's VMM pool calls (SONAME libcuda.so.1: the host's real
#     driver is loaded at run time);
#   - SASS for sm_90 only (`90-real`, no PTX: half the size; the H200 runs the same SASS);
#   - GGML_NATIVE=OFF with AVX2/FMA/F16C (the host's Xeon, not this VM's CPU), OpenMP off,
#     libstdc++/libgcc static, no rpath (needs glibc >= 2.36 on the host, which has 2.39).
# Run on the host: LD_LIBRARY_PATH=/usr/local/cuda/lib64 (libcudart.so.13, libcublas.so.13).
#
#   bash runtime/gpu/llamacpp-cuda-offline.sh SRC.tar.xz OUT.xz [WORK]   # ~20 min on 2 cores
#
# SRC.tar.xz is the trimmed llama.cpp of `llamacpp-cuda.sh` (llama-cpp-python 0.3.36's).
# Session 38 built .device/s38-llb/llama-bench-sm90.xz this way (21.9 MB; sha256 of the
# stripped binary b08f5ebcb58e7cf23484243e1bd1419a426bcdbfe5960da40364d94e8031d89c); nvcc
# 13.0.88 is not deterministic for one of its 144 kernels (fattn-tile dkq96-dv96), so a
# rebuild may differ in that one.
set -euo pipefail
SRC=$(realpath "${1:?SRC.tar.xz}"); OUT=$(realpath -m "${2:?OUT.xz}"); W=${3:-/tmp/llb}
mkdir -p "$W" && cd "$W"
python3 -m pip install --quiet --no-deps --target "$W/pip" \
  nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
  nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.0.0.19 nvidia-cuda-cccl==13.0.85 cmake ninja
P=$W/pip/nvidia/cu13
# A toolkit root CMake's FindCUDAToolkit accepts: bin, nvvm, include (CCCL under include/cccl
# as CUDA 13 lays it out, and its headers also at the top), lib (= lib64) with the stub.
rm -rf cuda && mkdir -p cuda/include cuda/lib/stubs
cp -r "$P/bin" "$P/nvvm" cuda/
cp -r "$P/include/." cuda/include/
cp -r "$P/include/cccl/." cuda/include/
cp -r "$P/lib/." cuda/lib/
ln -sf libcudart.so.13 cuda/lib/libcudart.so
ln -sf libcublas.so.13 cuda/lib/libcublas.so
ln -sf libcublasLt.so.13 cuda/lib/libcublasLt.so
ln -sfn lib cuda/lib64
syms="cuDeviceGet cuDeviceGetAttribute cuGetErrorString cuMemAddressFree cuMemAddressReserve
  cuMemCreate cuMemGetAllocationGranularity cuMemMap cuMemRelease cuMemSetAccess cuMemUnmap"
for s in $syms; do echo "int $s(void){return 999;}"; done > cuda_stub.c
gcc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o cuda/lib/stubs/libcuda.so cuda_stub.c
export PATH=$W/cuda/bin:$W/pip/cmake/data/bin:$W/pip/bin:$PATH CUDAToolkit_ROOT=$W/cuda \
  CUDACXX=$W/cuda/bin/nvcc PYTHONPATH=$W/pip
[ -d llama.cpp ] || tar xJf "$SRC"
cmake -S llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90-real -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DGGML_CUDA_NCCL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
  -DGGML_F16C=ON -DGGML_OPENMP=OFF -DGGML_CUDA_COMPRESSION_MODE=size \
  -DCUDAToolkit_ROOT="$W/cuda" -DCMAKE_CUDA_COMPILER="$W/cuda/bin/nvcc" \
  "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc" -DCMAKE_SKIP_BUILD_RPATH=ON \
  > configure.log
[ "${CONFIGURE_ONLY:-0}" = 1 ] && { tail -3 configure.log; exit 0; }
nice -n 19 cmake --build build --target llama-bench -j "$(nproc)" > build.log
strip -o llama-bench build/bin/llama-bench
readelf -d llama-bench | grep NEEDED
sha256sum llama-bench
xz -T2 -9e -c llama-bench > "$OUT"
ls -l llama-bench "$OUT"
