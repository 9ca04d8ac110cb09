#!/usr/bin/env bash
# Every GPU step of the session in one device call, on the H200 host. Prepared by
# runtime/gpu/prepare-device.sh (.device/pack.tar.xz: test binaries, the CLI, the TensorRT
# stand-in; .device/assets: the real models and images). Writes logs under $OUT.
#   STEPS="device standin detect cli" (default: all)
set -uo pipefail
OUT="${OUT:-/tmp/tether-out}"; mkdir -p "$OUT"
D="$(pwd)/.device"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
exec > >(tee "$OUT/h200.log") 2>&1
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
export XDG_CACHE_HOME=/tmp/tether-cache TETHER_ASSETS="$D/assets" TETHER_EVIDENCE_DIR="$OUT"
export RUST_LOG="${RUST_LOG:-info}" RUST_BACKTRACE=1
STEPS="${STEPS:-device standin detect cli}"
T0=$(date +%s); step() { echo; echo "== [$(( $(date +%s) - T0 ))s] $*"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
echo "== host"; date -u; uname -m; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader; nproc
if want device; then
  step "runtime: the CUDA device layer"
  "$B/bin/cuda_device" --test-threads=1 2>&1 | grep -v INFO
fi
if want standin; then
  step "TensorRT stand-in (NOT TensorRT): tether's layer, the model API and the device session"
  TETHER_TRT_STANDIN_DIR="$B/trt-standin" "$B/bin/trt_standin" --include-ignored --nocapture --test-threads=1 2>&1 | grep -v " INFO "
fi
if want detect; then
  step "detect: exactness, graphs, staging, hot path (synthetic network), real models + field cases (tract-cuda; NVRTC compile on first use)"
  TETHER_FIELD_CASES="$(pwd)/tests/field" "$B/bin/gpu_pipeline" --test-threads=1 --nocapture 2>&1 | grep -v " INFO "
fi
if want cli; then
  T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"; A="$D/assets"
  step "CLI: doctor, run on the GPU and the CPU"
  "$T" doctor -v
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle"
  for dev in cuda cpu; do "$T" -v run "$W/nudenet.bundle" "$A/astronaut.png" --device $dev 2>&1 | grep -v "tract_" ; done
  "$T" run "$W/doclaynet.bundle" "$A/page.png" --device cuda --json > "$OUT/doclaynet.cuda.json"
  "$T" run "$W/doclaynet.bundle" "$A/page.png" --device cpu --json > "$OUT/doclaynet.cpu.json"
  "$T" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --runs 2000 --warmup 50
fi
step "done"
