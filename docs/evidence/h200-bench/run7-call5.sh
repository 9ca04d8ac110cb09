#!/usr/bin/env bash
# Seventh run, call 5 (commit 8a204c3, the code of call 3; call 4's ahead-of-time compile
# was reverted): load times on a fresh host (cold, then warm driver JIT cache), and the
# VAD family's GPU tests (its network runs on the native engine too).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1 XDG_CACHE_HOME=/tmp/tether-cache
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; ls ~/.nv 2>&1; } > "$OUT/host.log"
S=$(date +%s)
timeout 60 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 --nocapture 2>&1 | grep -E "loaded in|worst|latency|fused in|test result" > "$OUT/native.log"
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  for p in fp16 fp16 tf32 tf32; do
    echo "=== bench nudenet $p staged"
    timeout 60 "$T" -v bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision $p --runs 2000 --warmup 30 --staged 2>&1 | grep -E "^\s+(total|model) |rror|native engine plan|loaded from libcuda" | sed -E 's/^(.{220}).*/\1/'
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/load.log" 2>&1
du -sh ~/.nv/ComputeCache >> "$OUT/host.log" 2>&1
for b in gpu_vad; do
  echo "=== $b" >> "$OUT/families.log"
  timeout 100 "$B/bin/$b" --test-threads=1 --nocapture 2>&1 | grep -v " INFO " >> "$OUT/families.log"
  echo "$b rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/families.log"
done
ls -la "$OUT"
