#!/usr/bin/env bash
# Every GPU step of a session in one device call, on the H200 host. Prepared by
# runtime/gpu/prepare-device.sh (.device/pack.tar.xz: test binaries, the CLI, the TensorRT
# stand-in; .device/assets: the real models and images). Writes logs under $OUT.
#   STEPS="device standin detect native ocr cli peer" (default: all)
#   TETHER_NATIVE_FRAMES (default 10000): graph replays per network in the native engine's
#   allocation/memory check; TETHER_HOT_FRAMES: the same for the detect pipeline.
set -uo pipefail
OUT="${OUT:-/tmp/tether-out}"; mkdir -p "$OUT"
D="$(pwd)/.device"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
exec > >(tee "$OUT/h200.log") 2>&1
# cuDNN, cuBLAS, NVRTC from the system install only: the host also has pip cuDNN 9.19 under
# site-packages/nvidia/cudnn/lib next to the apt cuDNN 9.14 that `libcudnn.so` names, and
# putting the pip folder on LD_LIBRARY_PATH mixes the two (CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
export XDG_CACHE_HOME=/tmp/tether-cache TETHER_ASSETS="$D/assets" TETHER_EVIDENCE_DIR="$OUT"
export RUST_LOG="${RUST_LOG:-info}" RUST_BACKTRACE=1
export TETHER_NATIVE_FRAMES="${TETHER_NATIVE_FRAMES:-10000}"
STEPS="${STEPS:-device standin detect native ocr cli peer}"
T0=$(date +%s); step() { echo; echo "== [$(( $(date +%s) - T0 ))s] $*"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
have() { [[ -x "$B/bin/$1" ]]; }
echo "== host"; date -u; uname -m; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader; nproc
if want device && have cuda_device; then
  step "runtime: the CUDA device layer"
  "$B/bin/cuda_device" --test-threads=1 2>&1 | grep -v INFO
fi
if want standin && have trt_standin; then
  step "TensorRT stand-in (NOT TensorRT): tether's layer, the model API and the device session"
  TETHER_TRT_STANDIN_DIR="$B/trt-standin" "$B/bin/trt_standin" --include-ignored --nocapture --test-threads=1 2>&1 | grep -v " INFO "
fi
if want native && have native_gpu; then
  step "native engine: libraries, GPU vs host reference, YOLOv8n 320 and DocLayNet 1024 fp32 ($TETHER_NATIVE_FRAMES frames), fp16"
  for t in libraries_are_found_and_reported host_reference_and_gpu_agree_on_noise yolov8n_320_fp32 yolov8n_doclaynet_1024_fp32 yolov8n_320_fp16 yolov8n_doclaynet_1024_fp16; do
    "$B/bin/native_gpu" --ignored --test-threads=1 --nocapture --exact "$t" 2>&1 | grep -v " INFO "
  done
fi
if want detect && have gpu_pipeline; then
  step "detect: exactness, graphs, staging, hot path (synthetic network), real models + field cases (engine per the model API: native first)"
  TETHER_FIELD_CASES="$(pwd)/tests/field" "$B/bin/gpu_pipeline" --test-threads=1 --nocapture 2>&1 | grep -v " INFO "
fi
if want ocr && have gpu_ocr; then
  step "OCR on the GPU: goldens, self-test"
  "$B/bin/gpu_ocr" --test-threads=1 --nocapture 2>&1 | grep -v " INFO "
fi
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"; A="$D/assets"
if want cli; then
  step "CLI: doctor, run on the GPU and the CPU, bench"
  "$T" doctor -v
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle"
  for dev in cuda cpu; do "$T" -v run "$W/nudenet.bundle" "$A/astronaut.png" --device $dev 2>&1 | grep -v "tract_" ; done
  "$T" run "$W/doclaynet.bundle" "$A/page.png" --device cuda --json > "$OUT/doclaynet.cuda.json"
  "$T" run "$W/doclaynet.bundle" "$A/page.png" --device cpu --json > "$OUT/doclaynet.cpu.json"
  if [[ -f "$A/ch_PP-OCRv4_det_infer.onnx" ]]; then
    "$T" build --family ocr --det "$A/ch_PP-OCRv4_det_infer.onnx" --rec "$A/ch_PP-OCRv4_rec_infer.onnx" --cls "$A/ch_ppocr_mobile_v2.0_cls_infer.onnx" -o "$W/ppocr.bundle"
    "$T" verify "$W/ppocr.bundle" --self-test --device cuda
    "$T" run "$W/ppocr.bundle" "$A/page.png" --device cuda --json > "$OUT/ocr.cuda.json"
    "$T" bench "$W/ppocr.bundle" "$A/page.png" --device cuda --runs 100 --warmup 5
  fi
  # Benchmarks (the PyTorch peer follows in the same call): graph vs eager interleaved in
  # fp32, then TF32 and fp16; JSON per run under $OUT.
  for m in "nudenet astronaut.png 2000" "doclaynet page.png 1000"; do
    set -- $m
    "$T" bench "$W/$1.bundle" "$A/$2" --device cuda --compare --runs "$3" --warmup 50 --json "$OUT/bench-$1-fp32.json"
    for p in tf32 fp16; do
      "$T" bench "$W/$1.bundle" "$A/$2" --device cuda --precision $p --runs "$3" --warmup 50 --json "$OUT/bench-$1-$p.json"
    done
  done
fi
if want peer; then
  step "PyTorch peer, same call: onnxruntime-folded, onnx2torch, traced + frozen, CUDA graph"
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  python3 "$(pwd)/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 2000 > "$OUT/peer-320n.json"
  python3 "$(pwd)/runtime/gpu/peer_torch.py" "$A/yolov8n-doclaynet.onnx" 1024 1024 --fp16 > "$OUT/peer-doclaynet.json"
fi
step "done"
