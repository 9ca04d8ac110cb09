#!/usr/bin/env bash
# Issue 26, session 44: the GPU decoder's tests on the real model (SmolLM2-135M-Instruct
# Q4_1) with main's default decoder (the layer kernel's graph below position 1,536, the fused
# step's from there): greedy tokens equal to llama.cpp's and the CPU engine's, teacher-forced
# logits, sampled requests repeating with their seed, the context limit, and 100,000
# generated tokens in 25 requests of 4,000 (positions up to 4,032, so both graphs run) with 0
# heap allocations and the device's free memory flat.
# Unpacks as runtime/gpu/s42-h200.sh does (`.device` folders carried: `*.xz` into $B,
# `part0?` into $W), so the GGUF's four parts can come over several calls.
# Written in session 44, when no device time was left; run in session 45 on an H100 with the
# binary of 0365230 (`.device/s44g`): 6 passed (docs/evidence/llm-gpu.md, session 45).
# Files (untracked): gpu_decode.xz (`cargo test --release -p tether-llm --features
# cuda,build,cli --no-run`, stripped), COMMIT.
# Two calls back to back (each under the 64 MiB carry with a sparse checkout of runtime/gpu):
#   carry .device/s44g .device/s37-g0 .device/s37-g1: bash runtime/gpu/s44-decode-h200.sh unpack
#   carry .device/s37-g2 .device/s37-g3:              bash runtime/gpu/s44-decode-h200.sh unpack decode
# (s42's `model` step also unpacks llama-bench when carried; without it that line of its log
# says so and the step goes on.)
set -u
R=$(pwd); W=/tmp/h15real; B=/tmp/s42-bin; mkdir -p $W $B
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$name.log; }
for s in "$@"; do
case "$s" in
unpack)
  bash $R/runtime/gpu/s42-h200.sh unpack
  ;;
decode)
  bash $R/runtime/gpu/s42-h200.sh model || exit $?
  cd $B
  sha256sum gpu_decode >> $OUT/host.log 2>&1
  step decode 500 env TETHER_ASSETS=$W/assets ./gpu_decode --test-threads 1 --nocapture
  grep -hE "^test |tokens in|allocations|differ|equal|rc=|panicked|test result" $OUT/decode.log | cut -c1-260
  cd $R
  ;;
*) echo "usage: $0 unpack | decode ..." >&2; exit 2 ;;
esac
done
