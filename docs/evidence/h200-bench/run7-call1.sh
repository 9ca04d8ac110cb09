#!/usr/bin/env bash
# Seventh run, call 1: cuDNN runtime fusion (conv + bias + SiLU [+ residual]) adopted by the
# native engine. YOLOv8n 320 fp16 native_gpu test (load time, fused count, correctness), then
# bench 320n fusion on/off (TETHER_CUDNN_FUSION=0) in fp16 and fp32 with the PyTorch peer,
# then the other YOLOv8n native_gpu tests and gpu_pipeline.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log"
S=$(date +%s)
timeout 150 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 --nocapture > "$OUT/native-320-fp16.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native-320-fp16.log"
TETHER_CUDNN_FUSION=0 timeout 60 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 --nocapture > "$OUT/native-320-fp16-nofusion.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native-320-fp16-nofusion.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
ROWS='^\s+(total|upload|model|stage-in) |frames/s|rror|load|fused|native engine plan'
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  for rep in 1 2; do
    for p in fp16 fp32; do
      for f in 2 0; do
        echo "=== bench nudenet astronaut.png $p staged fusion=$f rep $rep"
        TETHER_CUDNN_FUSION=$f timeout 90 "$T" -v bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision $p --runs 2000 --warmup 30 --staged 2>&1 | grep -E "$ROWS"
        echo "elapsed $(( $(date +%s) - S )) s"
      done
    done
  done
} > "$OUT/bench.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
echo "peer done at $(( $(date +%s) - S )) s" >> "$OUT/peer.log"
R2=$(( 560 - ($(date +%s) - S) ))
timeout $(( R2 > 200 ? R2 - 120 : 60 )) "$B/bin/native_gpu" --ignored yolov8n --skip yolov8n_320_fp16 --test-threads 1 --nocapture > "$OUT/native-rest.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native-rest.log"
R3=$(( 570 - ($(date +%s) - S) ))
timeout $(( R3 > 20 ? R3 : 10 )) "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "gpu_pipeline rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/pipeline.log"
ls -la "$OUT"
