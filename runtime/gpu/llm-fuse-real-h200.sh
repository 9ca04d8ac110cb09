#!/usr/bin/env bash
# H14 (issue 26, fused decode step) on the real SmolLM2-135M-Instruct Q4_1 GGUF, one call:
#   bash .device/s33-fuse/real.sh /tmp/SmolLM2-135M-Instruct.Q4_1.gguf     (logs under $OUT)
# (the GGUF reassembled on the host beforehand; carry: [".device/s33-fuse"]; ~5 min)
# 1. tether bench, main's binary (before, 364 launches) and this branch's (after, 153), same bundle;
# 2. gpu_fuse: fused vs unfused logits bit for bit on synthetic shapes AND the real model over
#    the golden chats (TETHER_FUSE_REAL=1), and both timed on the 30-layer SmolLM2 shape;
# 3. gpu_decode (the decoder's tests, now fused; known gaps reported ignored).
set -uo pipefail
D="$(cd "$(dirname "$0")" && pwd)"
G="$(realpath "${1:?usage: real.sh MODEL.gguf}")"
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib | tr '\n' ':')/usr/local/cuda/lib64
W=/tmp/s33-fuse-real && mkdir -p $W/assets && cd $W
for f in tether tether-main gpu_fuse gpu_decode; do xz -dc "$D/$f.xz" > $f && chmod +x $f; done
ln -sf "$G" assets/SmolLM2-135M-Instruct.Q4_1.gguf
{ date -u; hostname; nvidia-smi -L; sha256sum "$G" tether tether-main gpu_fuse gpu_decode; } > $OUT/host.txt 2>&1
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s.%N); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s" >> $OUT/$name.log; }
step build 60 ./tether build --family llm --gguf "$G" -o smollm2.bundle
for b in tether-main tether; do
  step bench_$b 120 ./$b bench smollm2.bundle --device cuda --n-prompt 128,2048 --n-gen 128 --runs 5
done
TETHER_ASSETS=$W/assets TETHER_FUSE_REAL=1 step gpu_fuse 120 ./gpu_fuse --test-threads 1 --nocapture
TETHER_ASSETS=$W/assets step gpu_decode 240 ./gpu_decode --test-threads 1 --nocapture
