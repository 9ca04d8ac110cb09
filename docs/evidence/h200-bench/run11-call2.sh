#!/usr/bin/env bash
# Eleventh run, call 2: the candidate-sized sort (sort_tiles sorts the least power of two
# that holds the candidates, one warp up to 64; no memset of the keys) against HEAD
# (b014833), same call. Fresh host, empty plan cache. gpu_pipeline with the new kernels
# (GPU = CPU bit for bit, up to 66,000 candidates; 0 allocations); then `tether bench`
# old and new interleaved: YOLOv8n 320 fp16 staged at the bundle's threshold, at 1.0 (no
# candidate) and 0.0 (every anchor), the uninstrumented total (--floor), DocLayNet fp16; then
# per-kernel GPU times of the post-processing under ncu (old and new, thresholds 0.25/0.0).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log" 2>&1
S=$(date +%s)
timeout 120 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/pipeline.log"
W=/tmp/tether-cli; mkdir -p "$W"
"$B/bin/tether" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
"$B/bin/tether" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
ROWS='^\s+(stage|total|model|upload|stage-in|letterbox|decode\+nms|download|collect|floor|beyond-floor) |frames/s|rror|host time beyond|WARN|panick'
bench() { # bin net img runs precision [args]
  local bin=$1 net=$2 img=$3 runs=$4 p=$5; shift 5
  timeout 60 "$B/bin/$bin" bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS"
}
{
  for args in "nudenet astronaut.png 3000 fp16 --staged" \
              "nudenet astronaut.png 3000 fp16 --staged --score-threshold 1.0" \
              "nudenet astronaut.png 2000 fp16 --staged --score-threshold 0.0" \
              "nudenet astronaut.png 3000 fp16 --staged --floor" \
              "nudenet astronaut.png 3000 tf32 --staged --floor" \
              "doclaynet page.png 2000 fp16 --staged" \
              "doclaynet page.png 2000 fp16 --staged --floor"; do
    for bin in tether-head tether; do
      echo "=== $bin bench $args"; bench $bin $args
    done
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
NCU=/usr/local/cuda/bin/ncu
K='regex:letterbox|decode_keys|sort_|nms_greedy'
for bin in tether-head tether; do
  for th in 0.25 0.0; do
    echo "=== ncu $bin 320 fp16 staged, score threshold $th"
    timeout 100 "$NCU" --graph-profiling node --kernel-name "$K" --launch-skip 60 --launch-count 12 \
      --metrics gpu__time_duration.sum --csv --print-units base \
      "$B/bin/$bin" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 \
      --runs 20 --warmup 5 --staged --score-threshold $th 2>&1 | grep -E '^"|ERR|rror' | cut -c1-400
  done
done > "$OUT/ncu.log" 2>&1
echo "elapsed $(( $(date +%s) - S )) s" >> "$OUT/ncu.log"
ls -la "$OUT"
