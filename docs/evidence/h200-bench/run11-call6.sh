#!/usr/bin/env bash
# Eleventh run, call 6: the bench header's `staging` line on the GPU (what was asked, and
# what `auto` resolved to), YOLOv8n 320 fp16 staged, 1,000 frames each.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_CACHE_DIR=/tmp/tether-plan-cache
W=/tmp/tether-cli; mkdir -p "$W"
"$B/bin/tether" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
for s in auto copy mapped mapped-outputs; do
  echo "=== --staging $s"
  timeout 60 "$B/bin/tether" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 \
    --runs 1000 --warmup 30 --staged --staging $s 2>&1 | grep -E "^\s+(staging|execution|total|download) |rror"
done > "$OUT/bench.log" 2>&1
timeout 60 "$B/bin/tether" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 \
  --runs 200 --staged --staging mapped-outputs --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["environment"]["staging"])' >> "$OUT/bench.log" 2>&1
ls -la "$OUT"
