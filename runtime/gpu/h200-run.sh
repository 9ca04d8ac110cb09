#!/usr/bin/env bash
# Every GPU step of a session in one device call, on the H200 host. Prepared by
# runtime/gpu/prepare-device.sh (.device/pack.tar.xz: test binaries, the CLI, the TensorRT
# stand-in; .device/assets: the real models and images). Writes logs under $OUT.
#   STEPS="device standin detect native ocr vad embed cli families peer" (default: all; a step
#   whose binary or assets were not prepared is skipped)
#   NATIVE_TESTS: the native engine's tests to run (default: all eight)
#   TETHER_NATIVE_FRAMES (default 10000): graph replays per network in the native engine's
#   allocation/memory check; TETHER_HOT_FRAMES (default 10000): frames of the detect session's
#   hot path (synthetic network; the GPU soak at 1,000,000); TETHER_REAL_HOT_FRAMES (default
#   10000): frames of the full pipeline on YOLOv8n 320 with the engine selection picks.
# The device tool brings back at most 8 files: everything but h200.log is packed into
# $OUT/results.tar.gz at the end.
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
STEPS="${STEPS:-device standin detect native ocr vad embed cli families peer}"
NATIVE_TESTS="${NATIVE_TESTS:-libraries_are_found_and_reported host_reference_and_gpu_agree_on_noise yolov8n_320_fp32 yolov8n_doclaynet_1024_fp32 yolov8n_320_tf32 yolov8n_doclaynet_1024_tf32 yolov8n_320_fp16 yolov8n_doclaynet_1024_fp16}"
T0=$(date +%s); step() { echo; echo "== [$(( $(date +%s) - T0 ))s] $*"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
have() { [[ -x "$B/bin/$1" ]]; }
echo "== host"; date -u; uname -m; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader; nproc
if want device && have cuda_device; then
  step "runtime: the CUDA device layer"
  "$B/bin/cuda_device" --test-threads=1 2>&1 | grep --line-buffered -v INFO
fi
if want device && have gpu_state; then
  step "runtime: the sessions' request state (append kernel in one captured graph, every position)"
  "$B/bin/gpu_state" --test-threads=1 2>&1 | grep --line-buffered -v INFO
fi
if want standin && have trt_standin; then
  step "TensorRT stand-in (NOT TensorRT): tether's layer, the model API and the device session"
  TETHER_TRT_STANDIN_DIR="$B/trt-standin" "$B/bin/trt_standin" --include-ignored --nocapture --test-threads=1 2>&1 | grep --line-buffered -v " INFO "
fi
if want native && have native_gpu; then
  step "native engine: libraries, GPU vs host reference, YOLOv8n 320 and DocLayNet 1024 fp32 ($TETHER_NATIVE_FRAMES frames), TF32, fp16"
  for t in $NATIVE_TESTS; do
    "$B/bin/native_gpu" --ignored --test-threads=1 --nocapture --exact "$t" 2>&1 | grep --line-buffered -v " INFO "
  done
fi
if want detect && have gpu_pipeline; then
  step "detect: exactness, graphs, staging, hot path (synthetic network), real models + field cases (engine per the model API: native first)"
  TETHER_FIELD_CASES="$(pwd)/tests/field" "$B/bin/gpu_pipeline" --test-threads=1 --nocapture 2>&1 | grep --line-buffered -v " INFO "
fi
if want ocr && have gpu_ocr; then
  step "OCR on the GPU: goldens, self-test"
  "$B/bin/gpu_ocr" --test-threads=1 --nocapture 2>&1 | grep --line-buffered -v " INFO "
fi
if want vad && have gpu_vad; then
  step "VAD on the GPU: probabilities and segments against the package's goldens, state ping-pong"
  "$B/bin/gpu_vad" --test-threads=1 --nocapture 2>&1 | grep --line-buffered -v " INFO "
fi
if want embed && have gpu_embed; then
  step "embed on the GPU: embeddings against onnxruntime and sentence-transformers goldens"
  "$B/bin/gpu_embed" --test-threads=1 --nocapture 2>&1 | grep --line-buffered -v " INFO "
fi
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"; A="$D/assets"
if want cli && have tether && [[ -f "$A/320n.onnx" ]]; then
  step "CLI: doctor, run on the GPU and the CPU, bench"
  "$T" doctor -v
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle"
  for dev in cuda cpu; do "$T" -v run "$W/nudenet.bundle" "$A/astronaut.png" --device $dev 2>&1 | grep --line-buffered -v "tract_" ; done
  "$T" run "$W/doclaynet.bundle" "$A/page.png" --device cuda --json > "$OUT/doclaynet.cuda.json"
  "$T" run "$W/doclaynet.bundle" "$A/page.png" --device cpu --json > "$OUT/doclaynet.cpu.json"
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
if want families && have tether; then
  step "CLI, the other families on the GPU: build, verify --self-test, run, bench"
  if [[ -f "$A/ch_PP-OCRv4_det_infer.onnx" ]]; then
    "$T" build --family ocr --det "$A/ch_PP-OCRv4_det_infer.onnx" --rec "$A/ch_PP-OCRv4_rec_infer.onnx" --cls "$A/ch_ppocr_mobile_v2.0_cls_infer.onnx" -o "$W/ppocr.bundle"
    "$T" verify "$W/ppocr.bundle" --self-test --device cuda
    "$T" run "$W/ppocr.bundle" "$A/text.png" --device cuda --json > "$OUT/ocr.cuda.json"
    "$T" bench "$W/ppocr.bundle" "$A/text.png" --device cuda --runs 200 --warmup 10 --json "$OUT/bench-ocr.json"
    # onnxruntime CPU peer, one thread: det at text.png's detector input (448x172 -> min side
    # 736, multiples of 32), cls and rec for one line at their fixed heights.
    PO=(python3 "$(pwd)/runtime/gpu/peer_ort.py")
    "${PO[@]}" "$A/ch_PP-OCRv4_det_infer.onnx" --shape x=1x3x736x1920 --runs 30 --warmup 3 --label det-736x1920 >> "$OUT/peer-ort.jsonl"
    "${PO[@]}" "$A/ch_ppocr_mobile_v2.0_cls_infer.onnx" --shape x=1x3x48x192 --label cls-48x192 >> "$OUT/peer-ort.jsonl"
    "${PO[@]}" "$A/ch_PP-OCRv4_rec_infer.onnx" --shape x=1x3x48x320 --label rec-48x320 >> "$OUT/peer-ort.jsonl"
  fi
  if [[ -f "$A/silero_vad_op18_ifless.onnx" ]]; then
    "$T" build --family vad --onnx "$A/silero_vad_op18_ifless.onnx" -o "$W/silero.bundle"
    "$T" verify "$W/silero.bundle" --self-test --device cuda
    "$T" run "$W/silero.bundle" "$A/Front_Center.wav" --device cuda --json > "$OUT/vad.cuda.json"
    "$T" bench "$W/silero.bundle" "$A/Front_Center.wav" --device cuda --runs 200 --warmup 10 --json "$OUT/bench-vad.json"
    python3 "$(pwd)/runtime/gpu/peer_ort.py" "$A/silero_vad_op18_ifless.onnx" --shape input=1x576 --shape state=2x1x128 --value sr=16000 --runs 2000 --warmup 50 --label chunk-512 >> "$OUT/peer-ort.jsonl"
  fi
  if [[ -f "$A/all-minilm-l6-v2-int8.onnx" ]]; then
    "$T" build --family embed --onnx "$A/all-minilm-l6-v2-int8.onnx" --tokenizer "$A/all-minilm-l6-v2-tokenizer.json" -o "$W/minilm.bundle"
    "$T" verify "$W/minilm.bundle" --self-test --device cuda
    "$T" run "$W/minilm.bundle" --text "A robot hears speech." --text "The machine listens to a voice." --device cuda --json > "$OUT/embed.cuda.json"
    printf 'A robot hears speech.\n' > "$W/one.txt"
    "$T" bench "$W/minilm.bundle" "$W/one.txt" --device cuda --runs 200 --warmup 10 --json "$OUT/bench-embed.json"
    python3 "$(pwd)/runtime/gpu/peer_ort.py" "$A/all-minilm-l6-v2-int8.onnx" --shape input_ids=1x8 --shape attention_mask=1x8 --shape token_type_ids=1x8 --runs 500 --warmup 20 --label seq-8 >> "$OUT/peer-ort.jsonl"
  fi
fi
if want peer && [[ -f "$A/320n.onnx" ]]; then
  step "PyTorch peer, same call: onnxruntime-folded, onnx2torch, traced + frozen, CUDA graph"
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  python3 "$(pwd)/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 2000 > "$OUT/peer-320n.json"
  python3 "$(pwd)/runtime/gpu/peer_torch.py" "$A/yolov8n-doclaynet.onnx" 1024 1024 --fp16 > "$OUT/peer-doclaynet.json"
fi
step "done"
( cd "$OUT" && files=$(ls | grep --line-buffered -v '^h200.log$' | grep --line-buffered -v '^results.tar.gz$'); [[ -n "$files" ]] && tar -czf results.tar.gz $files && rm -f $files )
