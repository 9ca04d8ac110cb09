#!/usr/bin/env bash
# Issue 26, session 42 (ran on an H100: docs/evidence/llm-gpu.md, the sections of session 42).
# Call 1 (`unpack kernels`, carry .device/s42a .device/s37-g0): branch s42-load's `gpu_fuse`
# (bit-equality, then the speed test beside main's binary) and the layer profile built on
# the branch's, main's and a variant's llm.cu. Calls 2-4 (`unpack`, carry .device/s42m
# .device/s37-g0; `unpack`, carry .device/s37-g1 .device/s37-g2; `ROUNDS=2 ... unpack real`,
# carry .device/s37-g3 .device/s39b) ran main's `gpu_fuse` and `tether` (.device/s42m) on
# the real model beside llama.cpp.
# Takes whatever `.device` folders the call carries (named in `carry`), so one script serves
# calls that split the files differently:
#   - any `*.xz` in a carried folder is unpacked into $B (/tmp/s42-bin; kept while the host
#     stays warm between back-to-back calls), any other file copied there;
#   - `part0?` files (the GGUF in raw parts) are copied into $W (/tmp/h15real).
# Files, built on the development VM (untracked, stripped):
#   gpu_fuse.xz       the branch's `cargo test --release -p tether-llm --features
#                     cuda,build,cli --no-run` test binary gpu_fuse
#   main-gpu_fuse.xz  the same from main (the baseline of the speed test)
#   tether.xz         the branch's `cargo build --release --bin tether`
#   layer-prof*.xz    runtime/gpu/s41-layer-prof.cu (nvcc -arch=sm_90 -O3) built on the
#                     branch's llm.cu (layer-prof), main's (layer-prof-main) and variants
#   llama-bench-sm90.xz  llamacpp-cuda-offline.sh's llama-bench
#   COMMIT            the branch commit the binaries are of
# Steps (any order, several per call):
#   unpack   unpack / copy what this call carried
#   kernels  gpu_fuse's bit-equality tests (the layer kernel's among them), then the speed
#            test alternating main's binary and the branch's (ROUNDS, default 2), then the
#            layer profile
#   model    the GGUF from its parts in $W, checked by sha256, and llama-bench unpacked
#            (also the first thing `real` does; s43-h200.sh's `real` calls it)
#   real     the real model: its three decoders equal bit for bit (TETHER_FUSE_REAL=1),
#            `tether bench` without and with TETHER_LLM_LAYER_KERNEL=1 (alternating), a chat
#            run with the layer kernel, llama.cpp's llama-bench (prebuilt) in the same call
# e.g. carry .device/s42a .device/s37-g0:  bash runtime/gpu/s42-h200.sh unpack kernels
# Logs under $OUT (`real` tars all of them into real-logs.tgz).
set -u
R=$(pwd); W=/tmp/h15real; B=/tmp/s42-bin; mkdir -p $W $B
G=$W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$name.log; }
for s in "$@"; do
case "$s" in
unpack)
  for d in $R/.device/*/; do
    for f in $d*; do
      [ -f "$f" ] || continue
      case "$f" in
        */part0?) cp "$f" $W/ ;;
        *.xz) n=$(basename "$f" .xz); case $n in llama-bench*) cp "$f" $B/ ;; *) xz -dc "$f" > $B/$n && chmod +x $B/$n ;; esac ;;
        *) cp "$f" $B/ ;;
      esac
    done
  done
  { date -u; hostname; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; cat $B/COMMIT 2>/dev/null; ls -l $W $B; } >> $OUT/host.log 2>&1
  ;;
kernels)
  (cd $B && sha256sum gpu_fuse main-gpu_fuse layer-prof*) >> $OUT/host.log 2>&1
  cd $B
  step fuse 300 ./gpu_fuse --skip speeds --test-threads 1 --nocapture
  for i in $(seq ${ROUNDS:-2}); do
    step main-speed 150 ./main-gpu_fuse fused_and_unfused_step_speeds --test-threads 1 --nocapture
    step speed 150 ./gpu_fuse fused_and_unfused_step_speeds --test-threads 1 --nocapture
  done
  for p in layer-prof*; do step $p 60 ./$p; done
  grep -hE "^test |differ|launches|layer kernel|tg128|rc=|panicked" $OUT/fuse.log $OUT/*speed.log | cut -c1-220
  grep -E "SMs|position|attention|barrier B|prologue|rc=" $OUT/layer-prof*.log
  cd $R
  ;;
model)
  mkdir -p $W/assets
  cat $W/part0? > $G
  (cd $W/assets && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c) >> $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
  bash $R/runtime/gpu/llamacpp-cuda.sh prebuilt $B/llama-bench-sm90.xz > $OUT/llamacpp-prebuilt.log 2>&1
  ;;
real)
  bash $R/runtime/gpu/s42-h200.sh model || exit $?
  cd $B
  step real-fuse 200 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse real_model --test-threads 1 --nocapture
  step build 60 ./tether build --family llm --gguf $G -o $W/smollm2.bundle
  for i in $(seq ${ROUNDS:-2}); do
    step bench 150 ./tether bench $W/smollm2.bundle --device cuda --n-prompt 128,2048 --n-gen 128 --runs 5
    step bench-layer 150 env TETHER_LLM_LAYER_KERNEL=1 RUST_LOG=tether_llm::gpu::decoder=debug ./tether bench $W/smollm2.bundle --device cuda --n-prompt 128,2048 --n-gen 128 --runs 5
  done
  step run-layer 60 env TETHER_LLM_LAYER_KERNEL=1 ./tether run $W/smollm2.bundle --device cuda --prompt "What is the capital of France?" --max-tokens 32
  step llamacpp 150 bash $R/runtime/gpu/llamacpp-cuda.sh bench $G
  grep -hE "^test |differ|launches|layer kernel|rc=|tg128|pp128|panicked" $OUT/*.log | cut -c1-220 | head -60
  (cd $OUT && tar czf real-logs.tgz *.log)
  cd $R
  ;;
*) echo "usage: $0 unpack | kernels | model | real ..." >&2; exit 2 ;;
esac
done
