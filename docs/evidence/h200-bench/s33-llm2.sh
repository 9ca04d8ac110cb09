#!/usr/bin/env bash
# Session 33, second real-model call (issue 26): the decoder's tests with the known gaps
# included and the 100,000-token allocation test, on the merged decoder (fused step with
# dependent launches, prefill graphs). Carried before, while the host stayed warm: the GGUF in
# four parts (.device/s33-gN, `bash .device/s33-gN/fetch.sh`, N = 1..4); in this call
# .device/s33-llm-a (the test binaries of runtime/gpu/s33-llm-h200.sh's commit):
#   bash .device/s33-llm-a/fetch.sh && bash runtime/gpu/s33-llm2-h200.sh
set -u
W=/tmp/h15real
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
mkdir -p $W/assets
cat $W/part00 $W/part01 $W/part02 $W/part03 | xz -dc > $W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
(cd $W/assets && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c) > $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
cd $W
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; sha256sum gpu_decode; } >> $OUT/host.log 2>&1
TETHER_ASSETS=$W/assets timeout -s INT 280 ./gpu_decode --test-threads 1 --nocapture --include-ignored > $OUT/gpu_decode.log 2>&1
echo "rc=$?" >> $OUT/gpu_decode.log
grep -E "^test|top-1|tokens|allocations|result|rc=" $OUT/gpu_decode.log | cut -c1-400 | head -40
