#!/usr/bin/env bash
# Issue 26, session 58 (docs/evidence/llm-gpu.md, session 58): main's decoder (binaries of
# 8c1666c; GPU code as session 56's 192ebc6) on the H200, every figure of the issue's evidence
# in three calls back to back, from a sparse checkout of runtime/gpu/. The GGUF's xz is split
# at 41,000,000 bytes so that each call's carry stays under 64 MiB and does work:
#   1. .device/s58a (part00, gpu_decode/gpu_fuse/gpu_ahead -fin.xz)   `unpack syn`
#   2. .device/s58b (part01, tether-fin.xz, COMMIT)                   `unpack cli decode real pack`
#   3. .device/s58c (llama-bench-sm90.xz, the gguf wheel)             `unpack beside peers pack`
# Each call begins `nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || exit 7`.
# Steps:
#   syn     gpu_fuse on synthetic weights (every fused decoder's logits against the unfused
#           step, bit for bit; its speed test skipped): needs no GGUF
#   real    gpu_fuse's real-model case and gpu_ahead (host time a token beyond the launch and
#           the 4-byte read)
#   cli, decode  s57-h200.sh's (the CLI's figures at seven depths, greedy and seeded text,
#           inter-token latency over 5,120 intervals; gpu_decode's correctness and 100,000
#           tokens)
#   beside, peers  s56-h200.sh's (llama.cpp's flash-attention decode between two of ours;
#           PyTorch's eager and static-cache + torch.compile forms, then ours)
set -u
source "$(dirname "$0")/lib.sh"
for s in "$@"; do
case "$s" in
unpack) unpack ;;
pack) bash $R/runtime/gpu/s55-h200.sh pack ;;
syn)
  cd $B
  step fuse 100 ./gpu_fuse-fin --skip speeds --test-threads 1 --nocapture
  grep -E "test result|differ|FAILED|panicked|rc=" $OUT/fuse.log | cut -c1-200 | tail -8
  cd $R ;;
real)
  [ -f $G ] || cat $W/part0? | xz -dc > $G
  gguf
  cd $B
  step fuse-real 60 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-fin real_model --test-threads 1 --nocapture
  step ahead 60 env TETHER_ASSETS=$W/assets ./gpu_ahead-fin --test-threads 1 --nocapture
  for f in fuse-real ahead; do echo "== $f"; grep -E "test result|host time|differ|FAILED|panicked|rc=" $OUT/$f.log | cut -c1-200 | tail -8; done
  cd $R ;;
cli|decode) LIMIT=$(left) bash $R/runtime/gpu/s57-h200.sh $s ;;
beside|peers) LIMIT=$(left) bash $R/runtime/gpu/s56-h200.sh $s ;;
*) echo "usage: $0 unpack | syn | cli | decode | real | beside | peers | pack ..." >&2; exit 2 ;;
esac
done
