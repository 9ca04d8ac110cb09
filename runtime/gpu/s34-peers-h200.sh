#!/usr/bin/env bash
# Session 34's side-by-side LLM run on the H200 (issue 26): in ONE device call, tether's GPU
# decoder (`tether bench --device cuda`), llama.cpp's CUDA build (llama-bench) and the PyTorch
# peers (transformers eager `generate`, static KV cache + its compile), SmolLM2-135M-Instruct
# Q4_1. Calls made before it, back to back while the host stays warm:
#   1. carry .device/s34-g1: `mkdir -p /tmp/h15real && cp .device/s34-g1/part00 /tmp/h15real/ &&
#      bash runtime/gpu/llamacpp-cuda.sh build .device/s34-g1/llama-src.tar.xz`
#   2-4. carry .device/s33-gN, `bash .device/s33-gN/fetch.sh` (N = 2..4: the GGUF's other parts)
#   5. carry .device/s34-bin: `bash runtime/gpu/s34-peers-h200.sh` (this script)
# .device/s34-bin holds tether.xz (stripped release build of the commit under test) and the
# gguf wheel (gguf==0.19.0, for transformers' GGUF loader). Logs under $OUT.
# BIN=DIR takes tether.xz and the wheel from another folder. Session 35 (docs/evidence/
# llm-gpu.md, last section) ran it as `BIN=.device/s35-bin FORMS=static_compile bash
# runtime/gpu/s34-peers-h200.sh` after calls 1. carry .device/s35-ll: `SECONDS_LEFT=380 bash
# runtime/gpu/llamacpp-cuda.sh build $(pwd)/.device/s35-ll/llama-src.tar.xz`; 2-8. carry
# .device/s35-gN (N = 0..6, the GGUF split raw in seven 14 MB parts): `mkdir -p /tmp/h15real
# && cp .device/s35-gN/part0N /tmp/h15real/`, the seventh also `cd /tmp/h15real && mkdir -p
# assets && cat part0? > assets/SmolLM2-135M-Instruct.Q4_1.gguf`.
set -u
W=/tmp/h15real; R=$(pwd); B=$(realpath ${BIN:-.device/s34-bin})
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
mkdir -p $W/assets
G=$W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
# The parts as carried: xz-compressed (session 34) or raw (xz -dcf copies those through).
[ -f $G ] || cat $W/part0? | xz -dcf > $G
(cd $W/assets && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c) > $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
xz -dc $B/tether.xz > $W/tether && chmod +x $W/tether
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; sha256sum $W/tether; } >> $OUT/host.log 2>&1
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s.%N); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s" >> $OUT/$name.log; }
cd $W
step cli 60 ./tether build --family llm --gguf $G -o $W/smollm2.bundle
step bench 220 ./tether bench $W/smollm2.bundle --device cuda --n-prompt 128,512,2048 --n-gen 128 --runs 5
if [ -x /tmp/llamacpp/build/bin/llama-bench ]; then
  step llamacpp 150 bash $R/runtime/gpu/llamacpp-cuda.sh bench $G
else
  echo "no llama-bench (the build call did not finish)" > $OUT/llamacpp.log
fi
python3 -c "import gguf" 2>/dev/null || python3 -m pip install --no-index --no-deps -q $B/gguf-0.19.0-py3-none-any.whl > $OUT/peers.log 2>&1 || { mkdir -p /tmp/pylib && (cd /tmp/pylib && python3 -m zipfile -e $B/gguf-0.19.0-py3-none-any.whl .); export PYTHONPATH=/tmp/pylib; }
step peers 240 python3 $R/runtime/gpu/peer_llm.py $G ${FORMS:-eager,static_compile}
grep -h "rc=\|^|\|pp128 \|pp512 \|pp2048 \|first token\|tg128\|no step ahead\|slowest\|launches per step\|tok_s\|ttft" $OUT/*.log | cut -c1-250 | head -80
