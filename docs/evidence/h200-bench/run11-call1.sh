#!/usr/bin/env bash
# Eleventh run, call 1: where the time outside the network goes, at HEAD (b014833). Fresh
# host, empty plan cache. Every stage row of `tether bench --staged` (letterbox, model,
# decode+nms, download) for YOLOv8n 320 fp16 and DocLayNet 1024 fp16, at the bundle's score
# threshold, with no candidate (threshold 1.0) and with every anchor a candidate (0.0); the
# bare launch floor; and whether a kernel profiler is installed.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; which nsys ncu; ls /usr/local/cuda/bin | head -50; } > "$OUT/host.log" 2>&1
S=$(date +%s)
T="$B/bin/tether-head"; W=/tmp/tether-cli; mkdir -p "$W"
"$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
"$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
ROWS='^\s+(stage|total|model|upload|stage-in|letterbox|decode\+nms|download|collect|floor|beyond-floor) |frames/s|rror|native engine plan|host time beyond|WARN|panick|candidates'
bench() { # net img runs precision [args]
  local net=$1 img=$2 runs=$3 p=$4; shift 4
  timeout 60 "$T" -v bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /; s/^(.{300}).*/\1/'
}
{
  for th in "" "--score-threshold 1.0" "--score-threshold 0.0"; do
    echo "=== bench nudenet fp16 staged $th"; bench nudenet astronaut.png 3000 fp16 --staged $th
  done
  echo "=== bench nudenet fp16 staged --floor"; bench nudenet astronaut.png 3000 fp16 --staged --floor
  echo "=== bench nudenet fp16 copied"; bench nudenet astronaut.png 3000 fp16
  for th in "" "--score-threshold 1.0"; do
    echo "=== bench doclaynet fp16 staged $th"; bench doclaynet page.png 2000 fp16 --staged $th
  done
  "$T" run "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 --json 2>/dev/null | head -c 600; echo
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
ls -la "$OUT"
