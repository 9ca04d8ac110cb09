#!/usr/bin/env bash
# Eighth run, call 3: the plan cache after review (the entries' CRC covers their lengths,
# nothing may follow the last entry, the deserialised plan's engine is checked against the
# configuration's, hits are counted once deserialised, in memory a plan keeps only its chosen
# plans, the unused ones are dropped first at the size bound). YOLOv8n 320 fp16 and TF32
# twice (empty cache, then warm), the fusion probe, junk appended to the file, the CLI.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; ls ~/.nv 2>&1; } > "$OUT/host.log"
S=$(date +%s)
for pass in cold warm; do
  echo "=== native_gpu, $pass plan cache" >> "$OUT/native.log"
  timeout 120 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 yolov8n_320_tf32 --test-threads 1 --nocapture 2>&1 | grep -E "loaded in|worst|detections|replay|allocations|latency|fused in|test result" >> "$OUT/native.log"
  echo "rc=${PIPESTATUS[0]} at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
  ls -la "$C" >> "$OUT/native.log" 2>&1
done
timeout 60 "$B/bin/native_gpu" --ignored --exact cudnn_runtime_fusion_probe --nocapture 2>&1 | grep -E "serialised|test result" > "$OUT/probe.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
ROWS='^\s+(total|model) |plan cache|WARN|rror'
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  F=$(ls "$C"/cudnn-plans-*.bin | head -1)
  for step in "bench (the bundle's first load)" "junk appended" "bench again"; do
    echo "=== $step"
    [[ "$step" == "junk appended" ]] && printf 'junk' >> "$F"
    t0=$(date +%s.%N)
    timeout 90 "$T" -v bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 --runs 1000 --warmup 30 --staged 2>&1 | grep -E "$ROWS" | sed -E 's/^(.{300}).*/\1/'
    echo "  process wall $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
ls -la "$C" >> "$OUT/host.log"
ls -la "$OUT"
