#!/usr/bin/env bash
# Sixth run, call 4 (final binaries, commit aacb556): gpu_pipeline (the staged hot path), then
# bench by default (frame copied in with streaming stores), --staged, --floor and
# --staged --floor at every precision on both models, 320n on a 1920x1080 frame, and the
# PyTorch peer, all in one call.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; grep -m1 "model name" /proc/cpuinfo; } > "$OUT/bench.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
timeout 200 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "gpu_pipeline rc=$?" >> "$OUT/pipeline.log"
ROWS='^\s+(total|model|upload|letterbox|decode\+nms|stage-in|collect|host-overhead|floor|beyond-floor) |host time beyond|rror'
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
  for m in "nudenet astronaut.png 3000" "doclaynet page.png 1000" "nudenet hd.jpg 2000"; do
    set -- $m; net=$1; img=$2; runs=$3
    for p in fp16 tf32 fp32; do
      for mode in "default" "staged --staged" "floor --floor" "staged-floor --staged --floor"; do
        set -- $mode; name=$1; shift
        [[ $img == hd.jpg && ( $p == tf32 || $name == *floor* ) ]] && continue
        echo "=== bench $net $img $p $name"
        timeout 60 "$T" bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" --json "$OUT/bench-$net-${img%.*}-$p-$name.json" 2>&1 | grep -E "$ROWS"
      done
    done
  done
} >> "$OUT/bench.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/yolov8n-doclaynet.onnx" 1024 1024 --fp16 --runs 500 > "$OUT/peer-doclaynet.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
(cd "$OUT" && tar -czf json.tar.gz *.json && rm -f *.json)
ls -la "$OUT"
