#!/usr/bin/env bash
# Eighth run, call 6: does pinning the bench to one core (taskset, no code change) make
# p99.9 / p50 <= 1.1 more reliable? 320n fp16 staged, 5,000 frames per run, pinned and
# unpinned alternating, 4 pairs; the plan cache warmed by a first load.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_CACHE_DIR=/tmp/tether-plan-cache RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; uptime; } > "$OUT/host.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
"$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
"$T" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 --runs 100 --staged >/dev/null 2>&1
{
  for rep in 1 2 3 4; do
    for mode in unpinned pinned; do
      echo "=== $mode rep $rep"
      if [[ $mode == pinned ]]; then P="taskset -c 5"; else P=""; fi
      timeout 60 $P "$T" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 --runs 5000 --warmup 100 --staged 2>&1 | grep -E "^\s+(total|model|upload) "
    done
  done
} > "$OUT/bench.log" 2>&1
ls -la "$OUT"
