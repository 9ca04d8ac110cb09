#!/usr/bin/env bash
# Stop 32 (#27): the C API's device buffers and a caller's CUDA stream on the H200
# (capi/tests/c/gpu_network.c, the check `c_api`'s gpu::network_device_io_on_caller_stream
# makes). Run on the GPU host as .device/s32-capigpu/gpu.sh (the ignored folder carried
# there) with, beside it: libtether.so.xz (the stripped release libtether_capi.so),
# gpu_network.xz (gpu_network.c compiled against it with RPATH $ORIGIN) and 320n.bundle
# (`tether build --family detect --onnx .assets/320n.onnx --input-size 320`). $OUT is the
# device tool's output folder.
set -u
cd "$(dirname "$0")"
xz -dkf libtether.so.xz && xz -dkf gpu_network.xz && chmod +x gpu_network
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib | tr '\n' ':')/usr/local/cuda/lib64
{ hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uname -m; sha256sum libtether.so gpu_network 320n.bundle; } 2>&1 | tee $OUT/host.txt
for s in copy mapped; do
  ./gpu_network 320n.bundle $s > $OUT/result-$s.json 2> $OUT/stderr-$s.txt
  echo "gpu_network 320n.bundle $s: rc=$?"; cat $OUT/result-$s.json; tail -3 $OUT/stderr-$s.txt
done
