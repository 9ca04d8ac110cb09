#!/usr/bin/env bash
# Session 33's real-model LLM run on the H200 (issue 26), the last of four device calls made
# back to back while the host stays warm (64 MiB per call with the checkout):
#   1-4. carry .device/s33-gN, `bash .device/s33-gN/fetch.sh` (N = 1..4: the xz-compressed
#        GGUF in four parts of 22.6 MB: the checkout itself is 35 MiB of the 64)
#   5. carry .device/s33-capi (the C API's allocation check; nothing run)
#   6. carry .device/s33-llm-a and .device/s33-llm-b, `bash .device/s33-llm-a/fetch.sh &&
#      bash runtime/gpu/s33-llm-h200.sh` (test binaries, tether; this script; then
#      .device/s33-capi/gpu.sh)
# The GGUF is SmolLM2-135M-Instruct.Q4_1 (SHA-256 checked). Binaries: stripped release builds of
# this commit (tether; the test binaries gpu_decode, gpu_prefill, gpu_sample, gpu_fuse of
# `cargo test --release -p tether-llm --features cuda,build,cli --no-run`). Logs under $OUT.
set -u
W=/tmp/h15real; B=$(pwd)/.device/s33-llm-b
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
mkdir -p $W/assets
cat $W/part00 $W/part01 $W/part02 $W/part03 | xz -dc > $W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
(cd $W/assets && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c) > $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
cd $W && xz -dc $B/tether.xz > tether && chmod +x tether
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; sha256sum tether gpu_decode gpu_prefill gpu_sample gpu_fuse; } >> $OUT/host.log 2>&1
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s.%N); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s" >> $OUT/$name.log; }
G=$W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
step cli 60 ./tether build --family llm --gguf $G -o $W/smollm2.bundle
step cli 60 ./tether verify $W/smollm2.bundle --self-test --device cuda
for p in "Where is Paris?" "Write a haiku about robots." "What is 17 * 23? Answer with the number only."; do
  for d in cuda cpu; do step text_$d 60 ./tether run $W/smollm2.bundle --device $d --prompt "$p" --temperature 0 --max-tokens 32 --json; done
done
step bench 150 ./tether bench $W/smollm2.bundle --device cuda --n-prompt 128,512,2048 --n-gen 128 --runs 5
TETHER_ASSETS=$W/assets step gpu_decode 120 ./gpu_decode --test-threads 1 --nocapture --skip decode_is_allocation_free_and_device_memory_flat
TETHER_ASSETS=$W/assets step gpu_prefill 60 ./gpu_prefill --test-threads 1 --nocapture
TETHER_ASSETS=$W/assets step gpu_sample 60 ./gpu_sample --test-threads 1 --nocapture
TETHER_ASSETS=$W/assets TETHER_FUSE_REAL=1 step gpu_fuse 90 ./gpu_fuse --test-threads 1 --nocapture
bash "$(dirname "$B")/s33-capi/gpu.sh" > /dev/null 2>&1
grep -h "rc=\|test result\|pp128 \|pp512 \|pp2048 \|first token\|tg128\|prefill graph\|launches per step" $OUT/*.log | head -60
cat $OUT/capi.log
