#!/usr/bin/env bash
# Issue 26 on the H200, session 40 (built with no device lent; run in session 41 on an H100:
# `kernels` only, docs/evidence/llm-gpu.md "The layer kernel on a GPU"): branch
# s40-layer's layer kernel (a whole Llama-style layer of Q8_0/Q4_0/Q4_1 weights as one launch
# of a 16-block thread block cluster, `layer` in families/llm/kernels/llm.cu) checked bit for
# bit against the fused step and timed beside main's fused step, with s39-layer.cu (the
# timing model of that structure) in the same call; then the real model. From a sparse
# checkout of the branch (as s39-h200.sh):
#   git checkout s40-layer && git sparse-checkout set --no-cone '/runtime/gpu/'
#   (after: git sparse-checkout disable && git checkout main)
# .device folders, built on the development VM (untracked):
#   s40a: gpu_fuse.xz (branch s40-layer: `cargo test --release -p tether-llm --features
#         cuda,build,cli --no-run`, stripped), main-gpu_fuse.xz (main's kernels, the
#         baseline), tether.xz (the branch's `tether`, stripped), COMMIT
#   s39m: layer (s39-layer.cu, nvcc -arch=sm_90 -O3 -std=c++17)
#   s37-g0..3: the SmolLM2-135M-Instruct Q4_1 GGUF in four raw parts; s39b: llama-bench-sm90.xz
# Three calls, back to back while the host stays warm (each at most 64 MiB):
#   1. carry .device/s40a .device/s39m .device/s37-g0:  bash runtime/gpu/s40-h200.sh kernels
#   2. carry .device/s37-g1 .device/s37-g2:              bash runtime/gpu/s40-h200.sh part
#   3. carry .device/s37-g3 .device/s39b:                bash runtime/gpu/s40-h200.sh real
# `kernels`: the timing model; gpu_fuse's bit-equality tests (the layer kernel's among them:
# layer_kernel_equals_the_fused_step_bit_for_bit), then the speed test alternating main's
# binary and the branch's (ROUNDS, default 2): the branch's has the row "fused + dependent
# launches + layer kernel". `real`: the real model's three decoders equal bit for bit
# (TETHER_FUSE_REAL=1), then `tether bench --device cuda` without and with
# TETHER_LLM_LAYER_KERNEL=1 (alternating), and llama.cpp (prebuilt) in the same call.
# Logs under $OUT (at most 8 files come back: `real` tars them).
set -u
R=$(pwd); W=/tmp/h15real; B=/tmp/s40-bin; mkdir -p $W $B
for d in $R/.device/s37-g*; do cp $d/part0? $W/ 2>/dev/null; done
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$name.log; }
case "${1:-}" in
kernels)
  [ -x $R/.device/s39m/layer ] && { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; timeout -s INT 90 $R/.device/s39m/layer; echo "rc=$?"; } > $OUT/layer-model.log 2>&1
  { date -u; hostname; cat $R/.device/s40a/COMMIT; } > $OUT/host.log 2>&1
  for f in $R/.device/s40a/*.xz; do n=$(basename $f .xz); xz -dc $f > $B/$n; chmod +x $B/$n; done
  (cd $B && sha256sum *) >> $OUT/host.log
  cd $B
  step fuse 300 ./gpu_fuse --skip speeds --test-threads 1 --nocapture
  for i in $(seq ${ROUNDS:-2}); do
    step main-speed 150 ./main-gpu_fuse fused_and_unfused_step_speeds --test-threads 1 --nocapture
    step speed 200 ./gpu_fuse fused_and_unfused_step_speeds --test-threads 1 --nocapture
  done
  cat $OUT/layer-model.log
  grep -hE "^test |differ|launches|tg128|rc=|panicked" $OUT/fuse.log $OUT/*speed.log | cut -c1-220
  ;;
part)
  ls -l $W
  ;;
real)
  mkdir -p $W/assets
  G=$W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
  cat $W/part0? > $G
  (cd $W/assets && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c) > $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
  cp $R/.device/s39b/* $B/ 2>/dev/null
  bash $R/runtime/gpu/llamacpp-cuda.sh prebuilt $B/llama-bench-sm90.xz > $OUT/llamacpp-prebuilt.log 2>&1
  cd $B
  step real-fuse 200 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse real_model --test-threads 1 --nocapture
  step build 60 ./tether build --family llm --gguf $G -o $W/smollm2.bundle
  for i in 1 2; do
    step bench 150 ./tether bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 5
    step bench-layer 150 env TETHER_LLM_LAYER_KERNEL=1 RUST_LOG=tether_llm::gpu::decoder=debug ./tether bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 5
  done
  step run-layer 60 env TETHER_LLM_LAYER_KERNEL=1 ./tether run $W/smollm2.bundle --device cuda --prompt "What is the capital of France?" --max-tokens 32
  step llamacpp 150 bash $R/runtime/gpu/llamacpp-cuda.sh bench $G
  grep -hE "^test |differ|launches|layer kernel|rc=|tg128|pp128|panicked" $OUT/*.log | cut -c1-220 | head -60
  (cd $OUT && tar czf real-logs.tgz *.log && for f in *.log; do case $f in bench.log|bench-layer.log|real-fuse.log|llamacpp.log|host.log) ;; *) rm -f $f ;; esac; done)
  ;;
*) echo "usage: $0 kernels | part | real" >&2; exit 2 ;;
esac
