#!/usr/bin/env bash
# Fifth run, call 11 (final binaries, commit d362dd3): a second benchmark of the final code,
# bench at the default layouts and the PyTorch peer in the same call.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_NATIVE_FRAMES=1000 TETHER_ASSETS="$A" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/bench.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
  for m in "nudenet astronaut.png 3000" "doclaynet page.png 1000"; do
    for pl in "fp16 default" "tf32 default" "fp32 default"; do
      set -- $m $pl
      echo "=== bench $1 $4 $5"
      timeout 60 "$T" bench "$W/$1.bundle" "$A/$2" --device cuda --precision $4 --runs "$3" --warmup 30 --json "$OUT/bench-$1-$4-$5.json" 2>&1 | grep -E "^\s+(total|model|upload|letterbox|decode\+nms|stage-in|host-overhead) |rror"
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
