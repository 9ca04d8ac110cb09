#!/usr/bin/env bash
# llama.cpp's CUDA build on the GPU host, the peer of tether's GPU decoder (issue 26).
#
#   bash runtime/gpu/llamacpp-cuda.sh build SRC.tar.xz   # unpack + build llama-bench (~minutes)
#   bash runtime/gpu/llamacpp-cuda.sh prebuilt BIN.xz    # or unpack one built off the host
#                                                       # (llamacpp-cuda-offline.sh; seconds)
#   bash runtime/gpu/llamacpp-cuda.sh bench MODEL.gguf   # llama-bench, logs under $OUT
#
# SRC.tar.xz is llama.cpp as vendored in the llama-cpp-python 0.3.36 sdist (the reference the
# CPU goldens come from; `pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all:`),
# packed without its models, docs, tests, examples and non-CUDA GPU backends so that it fits a
# device call (4.3 MB):
#   tar cJf llama-src.tar.xz --exclude=llama.cpp/{models,docs,tests,benches,examples,gguf-py,
#     conversion,media,pocs,tools/ui,tools/server} --exclude=llama.cpp/ggml/src/ggml-{metal,sycl,
#     vulkan,opencl,hexagon,et} llama.cpp
# Build: Release, CUDA for sm_90 (the H200), static libraries, flash-attention kernels included
# (llama.cpp's defaults otherwise). The build lives in /tmp/llamacpp on the host, which keeps it
# while the host stays warm between back-to-back calls.
set -u
L=/tmp/llamacpp
case "${1:-}" in
build)
  # Resumable: a call cut short by its time limit (SECONDS_LEFT, default 540) leaves the
  # build where ninja stopped; the next call (host still warm) continues it.
  export PATH=/usr/local/cuda/bin:$PATH
  if [ ! -f $L/build/build.ninja ]; then
    mkdir -p $L && cd $L && tar xJf "$2" || exit 2
    { date -u; hostname; nproc; nvcc --version | tail -2; cmake --version | head -1; ninja --version; } 2>&1
    cmake -S llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DGGML_CUDA_NCCL=OFF > $L/configure.log 2>&1 || { tail -30 $L/configure.log; exit 3; }
  fi
  cd $L
  t0=$(date +%s)
  timeout -s INT "${SECONDS_LEFT:-540}" cmake --build build --target llama-bench -j "$(nproc)" >> $L/build.log 2>&1
  rc=$?
  echo "build rc=$rc after $(( $(date +%s) - t0 )) s in this call"; tail -2 $L/build.log
  exit $rc
  ;;
prebuilt)
  mkdir -p $L/build/bin && xz -dc "$2" > $L/build/bin/llama-bench && chmod +x $L/build/bin/llama-bench
  { date -u; hostname; sha256sum $L/build/bin/llama-bench; } 2>&1
  ;;
bench)
  G=$2
  SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
  export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
  B=$L/build/bin/llama-bench
  # Decode (tg128) from an empty cache and at depths 128 and 2048 (-d: tokens already in the
  # cache), prompt processing pp128/pp512/pp2048; without and with flash attention; all layers
  # on the GPU; 5 repetitions each.
  $B -m "$G" -ngl 99 -fa off,on -p 0 -n 128 -d 0,128,2048 -r 5 -o md
  $B -m "$G" -ngl 99 -fa off,on -p 128,512,2048 -n 0 -r 5 -o md
  ;;
*) echo "usage: $0 build SRC.tar.xz | prebuilt BIN.xz | bench MODEL.gguf" >&2; exit 2 ;;
esac
