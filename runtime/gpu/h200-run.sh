#!/usr/bin/env bash
# Every GPU step of issue 3 (GPU runtime) in one device call, on the H200 host.
#
# Prepared on the development machine (no GPU needed) by runtime/gpu/prepare-device.sh:
#   .device/bin/cuda_device, cuda_logic     runtime test binaries (--features cuda)
#   .device/bin/gpu_pipeline                detect test binary (--features tract-cuda)
#   .device/assets/                         320n.onnx, astronaut.png, yolov8n-doclaynet.onnx, page.png
#   .device/kernels/                        detect kernel images + list-archs.sh
#   .device/torch_preprocess_bench.py       the PyTorch side-by-side
# Writes logs and evidence under $OUT (the device tool brings them back).
set -uo pipefail
OUT="${OUT:-/tmp/tether-out}"; mkdir -p "$OUT"
D="$(pwd)/.device"
exec > >(tee "$OUT/h200.log") 2>&1
echo "== host"; date -u; uname -m; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
export XDG_CACHE_HOME=/tmp/tether-cache   # tract-cuda's NVRTC cubin cache
export TETHER_ASSETS="$D/assets" TETHER_EVIDENCE_DIR="$OUT" RUST_LOG="${RUST_LOG:-info}" RUST_BACKTRACE=1
chmod +x "$D"/bin/* "$D"/kernels/*.sh 2>/dev/null
T0=$(date +%s)
step() { echo; echo "== [$(( $(date +%s) - T0 ))s] $*"; }

step "tract-cuda warm-up in the background (NVRTC kernel library compile, ~96 s cold)"
# Both real models (320n.onnx / astronaut.png, DocLayNet / page.png), cuDNN TF32 on (default)
# and off: the score tolerance against the CPU engine depends on it (docs/evidence/gpu-runtime.md).
( "$D/bin/gpu_pipeline" real_model::tract_cuda_pipeline_matches --nocapture --test-threads=1 > "$OUT/tract-real.log" 2>&1
  echo "exit $? (TF32 default)" >> "$OUT/tract-real.log"
  NVIDIA_TF32_OVERRIDE=0 "$D/bin/gpu_pipeline" real_model::tract_cuda_pipeline_matches --nocapture --test-threads=1 >> "$OUT/tract-real.log" 2>&1
  echo "exit $? (NVIDIA_TF32_OVERRIDE=0)" >> "$OUT/tract-real.log" ) &
BG=$!

step "kernel images: architectures (cuobjdump from /usr/local/cuda)"
CUOBJDUMP=/usr/local/cuda/bin/cuobjdump bash "$D/kernels/list-archs.sh"

step "runtime: pure logic + device layer"
"$D/bin/cuda_logic" --nocapture --test-threads=1
"$D/bin/cuda_device" --nocapture --test-threads=1

step "detect: exactness, graphs, staging/sync policies"
"$D/bin/gpu_pipeline" --nocapture --test-threads=1 --skip real_model --skip hot_path --skip bench

step "detect: hot path (>= 10,000 frames each, zero allocations, no device memory growth)"
"$D/bin/gpu_pipeline" hot_path --nocapture --test-threads=1

step "waiting for the tract-cuda warm-up / real-model comparison"
wait $BG; grep -E "detections on GPU|score tolerance|panicked|test result|exit|class " "$OUT/tract-real.log"
ls -R /tmp/tether-cache 2>/dev/null | head -5

step "tract-cuda allocations per frame"
"$D/bin/gpu_pipeline" --exact real_model::tract_cuda_allocations_per_frame_are_reported --nocapture --test-threads=1 2>&1 | grep -v "^\[" | tail -5

step "bench: pre+post, eager vs graph, copy vs mapped (10,000 runs each)"
"$D/bin/gpu_pipeline" --ignored --exact bench_pre_post_graph_vs_eager --nocapture 2>&1 | grep -v "^\[.*INFO"

step "bench: PyTorch side by side"
PYTHONUNBUFFERED=1 python3 "$D/torch_preprocess_bench.py"

step "bench: full pipeline with tract-cuda (TETHER_FULL_FRAMES=${TETHER_FULL_FRAMES:-10000})"
"$D/bin/gpu_pipeline" --ignored --exact bench_full_pipeline_tract_cuda --nocapture 2>&1 | grep -v "^\[.*INFO"

step "done"; nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv
