#!/usr/bin/env bash
# Eleventh run, call 4 (final code): the post-processing changes (candidate-sized sort, no keys memset,
# the IoU's no-overlap early out, the NMS walk with nothing but the mask test on its serial path)
# and `--staging mapped-outputs` against HEAD (b014833),
# same call, then the PyTorch peer. Fresh host, empty plan cache.
# 1. gpu_pipeline with the new kernels: GPU = CPU bit for bit up to 66,000 candidates, the
#    three stagings (copy, mapped, mapped outputs) agree, 0 allocations, the real 320n on
#    mapped outputs equal to the CPU.
# 2. tether bench, old and new interleaved: the post-processing per stage (instrumented),
#    then the uninstrumented frame (--floor: no event nodes) for every model and precision.
# 3. ncu: the post-processing kernels of the new code with every anchor a candidate.
# 4. PyTorch's traced, captured network (peer_torch.py).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log" 2>&1
S=$(date +%s)
timeout 150 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/pipeline.log"
W=/tmp/tether-cli; mkdir -p "$W"
"$B/bin/tether" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
"$B/bin/tether" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
ROWS='^\s+(stage|total|model|upload|stage-in|letterbox|decode\+nms|download|collect|floor|beyond-floor|staging) |frames/s|rror|host time beyond|WARN|panick'
bench() { # bin net img runs precision [args]
  local bin=$1 net=$2 img=$3 runs=$4 p=$5; shift 5
  timeout 60 "$B/bin/$bin" bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS"
}
N="nudenet astronaut.png 3000"; L="doclaynet page.png 2000"
{
  for args in "$N fp16 --staged" "$N fp16 --staged --score-threshold 0.0"; do
    echo "=== tether-head bench $args"; bench tether-head $args
    echo "=== tether bench $args"; bench tether $args
    echo "=== tether bench $args --staging mapped-outputs"; bench tether $args --staging mapped-outputs
  done
  for args in "$N fp16" "$N tf32" "$N fp32" "$L fp16" "$L tf32" "$L fp32"; do
    echo "=== tether-head bench $args --staged --floor"; bench tether-head $args --staged --floor
    echo "=== tether bench $args --staged --floor"; bench tether $args --staged --floor
    echo "=== tether bench $args --staged --floor --staging mapped-outputs"; bench tether $args --staged --floor --staging mapped-outputs
  done
  echo "=== tether bench $N fp16 --staged --floor --staging mapped"; bench tether $N fp16 --staged --floor --staging mapped
  echo "=== tether-head bench $N fp16 (copied in)"; bench tether-head $N fp16
  echo "=== tether bench $N fp16 (copied in) --staging mapped-outputs"; bench tether $N fp16 --staging mapped-outputs
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
{
  echo "=== ncu tether 320 fp16 staged, score threshold 0.0"
  timeout 100 /usr/local/cuda/bin/ncu --graph-profiling node --kernel-name 'regex:letterbox|decode_keys|sort_|nms_greedy' \
    --launch-skip 60 --launch-count 12 --metrics gpu__time_duration.sum --csv --print-units base \
    "$B/bin/tether" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 \
    --runs 20 --warmup 5 --staged --score-threshold 0.0 2>&1 | grep -E '^"|ERR|rror' | cut -c1-400
} > "$OUT/ncu.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 80 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/yolov8n-doclaynet.onnx" 1024 1024 --fp16 --runs 500 > "$OUT/peer-doclaynet.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
echo "elapsed $(( $(date +%s) - S )) s" >> "$OUT/peer.log"
ls -la "$OUT"
