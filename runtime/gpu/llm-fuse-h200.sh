#!/usr/bin/env bash
# H14 (issue 26, fused decode step): one device call on the synthetic SmolLM2-135M shape.
#   bash .device/s33-fuse/gpu.sh            (from the repository root; logs under $OUT)
# 1. gpu_fuse: fused vs unfused decoder, logits bit for bit and tokens (4-layer mixed types
#    with biases; 3-layer with head norms; 30-layer Q4_1), and both timed at 128 / 2048.
# 2. main's tether (before) and this branch's (after) on one bundle of the 30-layer
#    synthetic SmolLM2 shape: tether bench, and greedy / sampled text of both.
set -uo pipefail
D="$(cd "$(dirname "$0")" && pwd)"
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib | tr '\n' ':')/usr/local/cuda/lib64
W=/tmp/s33-fuse && mkdir -p $W && cd $W
for f in "$D"/*.xz; do xz -dc "$f" > "$(basename "$f" .xz)" && chmod +x "$(basename "$f" .xz)"; done
{ date -u; hostname; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; sha256sum tether tether-main gpu_fuse synthetic_gguf; } > $OUT/host.txt 2>&1
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s.%N); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s" >> $OUT/$name.log; }
step gpu_fuse 70 ./gpu_fuse --test-threads 1 --nocapture
step build 20 ./synthetic_gguf syn.gguf --layers 30 --type Q4_1
step build 20 ./tether-main build --family llm --gguf syn.gguf -o syn.bundle
for b in tether-main tether; do
  step bench_$b 35 ./$b bench syn.bundle --device cuda --n-prompt 128,2048 --n-gen 128 --runs 3
done
for b in tether-main tether; do
  step text_$b 20 ./$b run syn.bundle --device cuda --prompt "Where is Paris?" --temperature 0 --max-tokens 64 --json
  step text_$b 20 ./$b run syn.bundle --device cuda --prompt "Where is Paris?" --temperature 0.8 --seed 5 --repeat-penalty 1.1 --max-tokens 64 --json
done
# Per-kernel times of one short decode run of each binary (graph nodes traced).
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
if [[ -n "$NSYS" ]]; then
  for b in tether-main tether; do
    step prof_$b 40 "$NSYS" profile --cuda-graph-trace=node -t cuda -o prof_$b --force-overwrite true ./$b bench syn.bundle --device cuda --n-prompt 128 --n-gen 64 --runs 1
    step prof_$b 20 "$NSYS" stats --report cuda_gpu_kern_sum prof_$b.nsys-rep
  done
else echo "no nsys" > $OUT/prof.log; fi
ls -la > $OUT/files.txt
