#!/usr/bin/env bash
# Eleventh run, call 5 (the committed code): after call 4, a whole tile is sorted by the loop
# this kernel had before (constant bounds, the block's size as step), because the candidate-
# sized sort had made the many-candidate case slower (ncu: 28 -> 38 us). Fresh host, empty
# plan cache. gpu_pipeline (GPU = CPU exactly up to 66,358 candidates, the stagings, 0
# allocations); ncu of the post-processing kernels at thresholds 0.25 and 0.0, old and new;
# the frame at 320 fp16, old and new, instrumented at both thresholds and uninstrumented.
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
ROWS='^\s+(stage|total|model|upload|letterbox|decode\+nms|download|floor|beyond-floor) |frames/s|rror|host time beyond|WARN|panick'
bench() { # bin [args]
  local bin=$1; shift
  timeout 60 "$B/bin/$bin" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 --runs 3000 --warmup 30 --staged "$@" 2>&1 | grep -E "$ROWS"
}
{
  for args in "" "--score-threshold 0.0" "--floor"; do
    for bin in tether-head tether; do echo "=== $bin bench 320 fp16 --staged $args"; bench $bin $args; done
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
for bin in tether-head tether; do
  for th in 0.25 0.0; do
    echo "=== ncu $bin 320 fp16 staged, score threshold $th"
    timeout 60 /usr/local/cuda/bin/ncu --graph-profiling node --kernel-name 'regex:letterbox|decode_keys|sort_|nms_greedy' \
      --launch-skip 60 --launch-count 12 --metrics gpu__time_duration.sum --csv --print-units base \
      "$B/bin/$bin" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 \
      --runs 20 --warmup 5 --staged --score-threshold $th 2>&1 | grep -E '^"|ERR|rror' | cut -c1-400
  done
done > "$OUT/ncu.log" 2>&1
echo "elapsed $(( $(date +%s) - S )) s" >> "$OUT/ncu.log"
ls -la "$OUT"
