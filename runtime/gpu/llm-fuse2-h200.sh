#!/usr/bin/env bash
# H16 (issue 26, fused decode step made faster): one device call on the synthetic
# SmolLM2-135M shape (30 layers, Q4_1).
#   bash .device/s33-fuse2/gpu.sh            (from the repository root; logs under $OUT)
# 1. gpu_fuse: unfused vs fused vs fused with programmatic dependent launches: logits bit
#    for bit, and the three timed at positions 128 / 2048 (reported, not asserted).
# 2. main's tether (unfused) and this branch's (fused + dependent launches, the default) on
#    one bundle of the synthetic shape: tether bench.
# 3. Per-kernel durations (Nsight Compute, graph nodes, caches not flushed) of ~1 step of
#    this branch (and of main with PROF_MAIN=1).
set -uo pipefail
D="$(cd "$(dirname "$0")" && pwd)"
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib | tr '\n' ':')/usr/local/cuda/lib64
W=/tmp/s33-fuse2 && mkdir -p $W && cd $W
for f in "$D"/*.xz; do xz -dc "$f" > "$(basename "$f" .xz)" && chmod +x "$(basename "$f" .xz)"; done
{ date -u; hostname; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; sha256sum tether tether-main gpu_fuse synthetic_gguf; } > $OUT/host.txt 2>&1
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s.%N); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s" >> $OUT/$name.log; }
step gpu_fuse 60 ./gpu_fuse --test-threads 1 --nocapture speeds
step gpu_fuse 15 ./gpu_fuse --test-threads 1 --nocapture --skip speeds
step build 10 ./synthetic_gguf syn.gguf --layers 30 --type Q4_1
step build 10 ./tether-main build --family llm --gguf syn.gguf -o syn.bundle
for b in tether-main tether; do
  step bench_$b 15 ./$b bench syn.bundle --device cuda --n-prompt 128,2048 --n-gen 128 --runs 2
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [[ -n "$NCU" ]]; then
  step prof_tether 15 "$NCU" --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum --launch-skip 5000 --launch-count 160 --print-summary per-kernel ./tether bench syn.bundle --device cuda --n-prompt 128 --n-gen 8 --runs 1
  [[ "${PROF_MAIN:-0}" == 1 ]] && step prof_tether-main 15 "$NCU" --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum --launch-skip 8000 --launch-count 370 --print-summary per-kernel ./tether-main bench syn.bundle --device cuda --n-prompt 128 --n-gen 8 --runs 1
else echo "no ncu" > $OUT/prof.log; fi
ls -la > $OUT/files.txt
