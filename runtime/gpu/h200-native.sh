#!/usr/bin/env bash
# The native GPU engine's GPU tests in one device call on the H200 host (prepared by
# runtime/gpu/native-prepare.sh; carry `.device/native`). Writes the log under $OUT.
#
# YOLO set: kernel image architectures; library versions; YOLOv8n 320 and DocLayNet 1024 in
# fp32 (eager vs tract CPU raw + detections, graph replay vs eager, zero host allocations and
# flat device memory over $TETHER_NATIVE_FRAMES frames, latency) and fp16; GPU vs the
# host reference executor on noise.
# Extra set: MiniLM int8 and PP-OCRv4 det (eager vs tract CPU, replay, allocations).
set -uo pipefail
OUT="${OUT:-/tmp/tether-out}"; mkdir -p "$OUT"
D="$(pwd)/.device/native"
exec > >(tee "$OUT/h200-native.log") 2>&1
echo "== host"; date -u; uname -m; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
export TETHER_ASSETS="$D/assets" RUST_LOG="${RUST_LOG:-info}" RUST_BACKTRACE=1
export TETHER_NATIVE_FRAMES="${TETHER_NATIVE_FRAMES:-100000}"
chmod +x "$D"/bin/* "$D"/kernels/*.sh 2>/dev/null
T0=$(date +%s)
step() { echo; echo "== [$(( $(date +%s) - T0 ))s] $*"; }
run() { "$D/bin/native_gpu" --ignored --test-threads=1 --nocapture --exact "$@"; }

if [[ "$(cat "$D/set")" == extra ]]; then
  step "libraries"; run libraries_are_found_and_reported
  step "MiniLM int8 fp32"; run minilm_int8_fp32
  step "PP-OCRv4 det fp32"; run ppocr_v4_det_fp32
  exit 0
fi
step "kernel images: architectures"
CUOBJDUMP=/usr/local/cuda/bin/cuobjdump bash "$D/kernels/list-archs.sh"
step "libraries (cuDNN, cuBLAS: versions and the files loaded)"; run libraries_are_found_and_reported
step "GPU vs the host reference executor (same IR, same memory plan)"; run host_reference_and_gpu_agree_on_noise
step "YOLOv8n 320 fp32 ($TETHER_NATIVE_FRAMES frames)"; run yolov8n_320_fp32
step "DocLayNet 1024 fp32 ($TETHER_NATIVE_FRAMES frames)"; run yolov8n_doclaynet_1024_fp32
TETHER_NATIVE_FRAMES=10000
step "YOLOv8n 320 fp16"; run yolov8n_320_fp16
step "DocLayNet 1024 fp16"; run yolov8n_doclaynet_1024_fp16
echo; echo "== done in $(( $(date +%s) - T0 ))s"
