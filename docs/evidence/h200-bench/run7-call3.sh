#!/usr/bin/env bash
# Seventh run, call 3: the 1x1 matrix products of the channels-last plans become 1x1
# convolutions again (layout::pointwise_gemms_as_convolutions) so that cuDNN fuses their
# bias and SiLU too. Fresh host: the first loads show the cold driver JIT cache. YOLOv8n
# native_gpu tests (fp16, TF32), gpu_pipeline, then the bench against the PyTorch peer.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log"
S=$(date +%s)
timeout 200 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 yolov8n_320_tf32 yolov8n_doclaynet_1024_fp16 yolov8n_doclaynet_1024_tf32 --test-threads 1 --nocapture > "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
timeout 120 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "gpu_pipeline rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/pipeline.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
ROWS='^\s+(total|model|upload|stage-in) |frames/s|rror|native engine plan'
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
  for rep in 1 2; do
    for m in "nudenet astronaut.png 2000" "doclaynet page.png 1000"; do
      set -- $m; net=$1; img=$2; runs=$3
      for p in fp16 tf32; do
        for mode in "copied" "staged --staged"; do
          set -- $mode; name=$1; shift
          echo "=== bench $net $p $name rep $rep"
          timeout 60 "$T" -v bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /'
        done
      done
    done
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 80 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/yolov8n-doclaynet.onnx" 1024 1024 --fp16 --runs 500 > "$OUT/peer-doclaynet.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
echo "elapsed $(( $(date +%s) - S )) s" >> "$OUT/peer.log"
ls -la "$OUT"
