#!/usr/bin/env bash
# Session 34's real-model test call on the H200 (issue 26), after runtime/gpu/s34-peers-h200.sh
# in the previous call (which left the GGUF, the bundle and `tether` in /tmp/h15real). Carries
# .device/s34-tests: the stripped, xz-compressed test binaries gpu_numerics, gpu_decode,
# gpu_ahead, gpu_fuse of the commit in .device/s34-bin/COMMIT
# (`cargo test --release -p tether-llm --features cuda,build,cli --no-run`).
#   bash runtime/gpu/s34-final-tests-h200.sh      (logs under $OUT)
# BIN=DIR takes the test binaries from another folder; gpu_fuse's step runs when it is there.
# Session 35 ran `BIN=.device/s35-tests bash runtime/gpu/s34-final-tests-h200.sh` after
# `BIN=.device/s35-bin ... s34-peers-h200.sh`, with gpu_numerics, gpu_decode, gpu_ahead.
# gpu_prefill's step runs when its binary is there; SKIP_ALLOC=1 leaves out the 100,000-token
# allocation run (session 36: `BIN=.device/s36-tests SKIP_ALLOC=1`, after its peers call).
set -u
W=/tmp/h15real; B=$(realpath ${BIN:-.device/s34-tests}); T0=$(date +%s)
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
cd $W || exit 3
for f in $B/gpu_*.xz; do n=$(basename $f .xz); xz -dc $f > $n && chmod +x $n; done
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; sha256sum gpu_* tether assets/*.gguf; } > $OUT/tests-host.log 2>&1
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s.%N); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s" >> $OUT/$name.log; }
export TETHER_ASSETS=$W/assets
step gpu_numerics 120 ./gpu_numerics --test-threads 1 --nocapture
step gpu_ahead 90 ./gpu_ahead --test-threads 1 --nocapture
step gpu_decode 200 ./gpu_decode --test-threads 1 --nocapture --include-ignored --skip decode_is_allocation_free_and_device_memory_flat
[ -x gpu_prefill ] && step gpu_prefill 120 ./gpu_prefill --test-threads 1 --nocapture
[ -x gpu_fuse ] && TETHER_FUSE_REAL=1 step gpu_fuse_real 120 ./gpu_fuse --test-threads 1 --nocapture real_model
step cli 60 ./tether verify $W/smollm2.bundle --self-test --device cuda
for p in "Where is Paris?" "Write a haiku about robots." "What is 17 * 23? Answer with the number only."; do
  for d in cuda cpu; do step text_$d 60 ./tether run $W/smollm2.bundle --device $d --prompt "$p" --temperature 0 --max-tokens 32 --json; done
done
left=$(( 560 - ($(date +%s) - T0) ))
if [ "${SKIP_ALLOC:-0}" = 1 ]; then
  echo "skipped: SKIP_ALLOC=1" > $OUT/gpu_decode_alloc.log
elif [ $left -gt 150 ]; then
  step gpu_decode_alloc $left ./gpu_decode --test-threads 1 --nocapture --include-ignored decode_is_allocation_free_and_device_memory_flat
else
  echo "skipped: $left s left in the call" > $OUT/gpu_decode_alloc.log
fi
grep -hE "^test |pp128|pp512|pp2048|differ|greedy|top-1|GPU =|equal|host time|allocations|rc=|result|\"text\"|host_us" $OUT/*.log | cut -c1-300 | head -90
