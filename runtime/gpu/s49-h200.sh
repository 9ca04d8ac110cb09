#!/usr/bin/env bash
# Issue 26, session 49 (docs/evidence/llm-gpu.md, session 49): the layers' tails (the fused
# step's QKV and cluster attention launches, then the layer kernel's output projection and
# FFN as one cluster launch: 3 launches a layer instead of 5) beside the decoders they join,
# on the synthetic SmolLM2 shape and the real model, with llama.cpp's decode in the same call.
# Files (built on the development VM, stripped, xz), carried in .device folders over
# consecutive calls while the host is warm (all unpacked by lib.sh's `unpack`):
#   gpu_fuse-new.xz, gpu_decode-new.xz, gpu_ahead-new.xz   `cargo test --release -p tether-llm
#                      --features cuda,build,cli --no-run` of the change
#   tether-new.xz      the change's `cargo build --release --bin tether`
#                      (TETHER_LLM_LAYER_TAIL=0: main's decoder, the same graphs)
#   part0?             SmolLM2-135M-Instruct.Q4_1.gguf in parts (`split -b 34000000`)
#   llama-bench-sm90.xz  runtime/gpu/llamacpp-cuda-offline.sh's llama-bench
# Steps:
#   unpack    lib.sh's
#   fuse      gpu_fuse but its speed test (the tails bit-equal to the fused step), then its
#             speed test at AT for the fused step, the default decoder, the tails alone and
#             the layer kernel below the default position with the tails from there
#   decode    gpu_decode on the real model but the 100,000-token allocation test; gpu_ahead;
#             gpu_fuse's real-model case (four decoders' logits bit-equal)
#   real      the real model: `tether bench` with the tails off (main's decoder) and on,
#             alternating (2 rounds), greedy, the tails at every position, llama-bench beside,
#             inter-token latency at 2,048 (5,120 intervals), sampled text twice
#   fuse2     as fuse for the paired tails (each tail also computing the next layer's Q/K/V:
#             2 launches a layer), the speed test with the tails paired and not
#             (TETHER_LLM_TAIL_PAIR=0) at 128, 512, 768, 1,024, 2,048
#   real2     as real with the paired tails: main's decoder (TETHER_LLM_LAYER_TAIL=0
#             TETHER_LLM_LAYER_KERNEL_BELOW=1536), the tails unpaired, paired, each below
#             the new default switch; the paired tails at every position; llama-bench beside
#   final     gpu_fuse (but its speed test; then the speed test of the
#             fused step, the default decoder before the tails and the default decoder);
#             with the GGUF: gpu_decode and gpu_ahead as in decode, then `tether bench` of
#             main's decoder and the default decoder alternating, greedy, llama-bench beside,
#             inter-token latency at 128 and 2,048 (5,120 intervals each), sampled text twice
#   alloc     the GGUF assembled, gpu_decode's 100,000-token allocation test (25 requests of
#             4,000 tokens: positions up to 4,034, the tails' graph from 640 on), then gpu_fuse
#             but its speed test
#   pack      the logs into logs.tar.xz
# Calls (all on an H100; docs/evidence/llm-gpu.md, session 49): 1 `unpack fuse`; 2, 5, 8
# the GGUF's part01 + part02; 3 part00 + llama-bench: `unpack decode real pack` (the tails
# of 3 launches, switch at 1,536); 4 `unpack fuse2`; 6 `unpack decode real2 pack`; 7
# `unpack final`, 9 `unpack final pack` (tether of 0845dfe, the test binaries of 42a0a9b).
# `alloc` (.device/s49g, d6df7b9's binaries, after the GGUF's parts) did not run: no machine
# was lent after call 9.
set -u
source "$(dirname "$0")/lib.sh"
AT=128,256,512,768,1024,1536,2048
for s in "$@"; do
case "$s" in
unpack) unpack ;;
fuse)
  cd $B
  step fuse 300 ./gpu_fuse-new --skip speeds --test-threads 1 --nocapture
  step speed 200 env TETHER_FUSE_AT=128,1024,1536,2048 TETHER_FUSE_VARIANTS=1,3,4,5 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
  grep -hE "^test |differ|launches|rc=|panicked|test result" $OUT/fuse.log | cut -c1-220
  grep -hE "tg128@|rc=" $OUT/speed.log | sed -E 's/SmolLM2 shape, 30 layers Q4_1, //' | cut -c1-220
  cd $R ;;
decode)
  gguf
  cd $B
  step decode 200 env TETHER_ASSETS=$W/assets ./gpu_decode-new --skip allocation_free --test-threads 1 --nocapture
  step ahead 100 ./gpu_ahead-new --test-threads 1 --nocapture
  step fuse-real 200 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-new real_model --test-threads 1 --nocapture
  grep -hE "^test |chat |top-1|differ|rc=|panicked|test result" $OUT/decode.log $OUT/ahead.log $OUT/fuse-real.log 2>/dev/null | cut -c1-220
  cd $R ;;
real)
  gguf
  cd $B
  sha256sum tether-new >> $OUT/host.log 2>&1
  step build 60 ./tether-new build --family llm --gguf $G -o $W/smollm2.bundle
  for i in 1 2; do
    step bench-old 100 env TETHER_LLM_LAYER_TAIL=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-new 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  step bench-greedy 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3 --temperature 0
  step bench-tails 100 env TETHER_LLM_LAYER_KERNEL=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  llamacpp $AT
  step itl-new 90 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt 2048 --n-gen 128 --runs 40
  for i in 1 2; do step text 30 ./tether-new run $W/smollm2.bundle --device cuda --prompt "Write a haiku about the sea." --seed 7 --max-tokens 48 --json; done
  for f in bench-old bench-new bench-greedy bench-tails itl-new; do echo "== $f"; grep -E "tg128|inter-token|launches|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
  grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
  grep -hoE '"text": *"[^"]{0,120}' $OUT/text.log
  cd $R ;;
fuse2)
  cd $B
  step fuse 300 ./gpu_fuse-new --skip speeds --test-threads 1 --nocapture
  for v in 0 1; do
    step speed-pair$v 200 env TETHER_LLM_TAIL_PAIR=$v TETHER_FUSE_AT=128,512,768,1024,2048 TETHER_FUSE_VARIANTS=1,3,4 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
  done
  grep -hE "^test |differ|launches|rc=|panicked|test result" $OUT/fuse.log | cut -c1-220
  for v in 0 1; do echo "== pair $v"; grep -hE "tg128@|rc=" $OUT/speed-pair$v.log | sed -E 's/SmolLM2 shape, 30 layers Q4_1, //' | cut -c1-220; done
  cd $R ;;
real2)
  gguf
  cd $B
  sha256sum tether-new >> $OUT/host.log 2>&1
  [ -f $W/smollm2.bundle ] || step build 60 ./tether-new build --family llm --gguf $G -o $W/smollm2.bundle
  for i in 1 2; do
    step bench-main 100 env TETHER_LLM_LAYER_TAIL=0 TETHER_LLM_LAYER_KERNEL_BELOW=1536 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-unpaired 100 env TETHER_LLM_TAIL_PAIR=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-new 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  step bench-greedy 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3 --temperature 0
  step bench-tails 100 env TETHER_LLM_LAYER_KERNEL=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  llamacpp $AT
  step itl-new 90 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt 2048 --n-gen 128 --runs 40
  for i in 1 2; do step text 30 ./tether-new run $W/smollm2.bundle --device cuda --prompt "Write a haiku about the sea." --seed 7 --max-tokens 48 --json; done
  for f in bench-main bench-unpaired bench-new bench-greedy bench-tails itl-new; do echo "== $f"; grep -E "tg128|inter-token @2048|launches per|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
  grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
  grep -hoE '"text": *"[^"]{0,120}' $OUT/text.log
  cd $R ;;
final)
  cd $B
  step fuse 300 ./gpu_fuse-new --skip speeds --test-threads 1 --nocapture
  step speed 200 env TETHER_FUSE_AT=128,512,768,1024,2048 TETHER_FUSE_VARIANTS=1,3,5 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
  grep -hE "^test |differ|rc=|panicked|test result" $OUT/fuse.log | cut -c1-200
  grep -hE "tg128@|rc=" $OUT/speed.log | sed -E 's/SmolLM2 shape, 30 layers Q4_1, //' | cut -c1-200
  if [ -f $W/part00 ] && [ -f $W/part02 ]; then
    gguf
    step decode 200 env TETHER_ASSETS=$W/assets ./gpu_decode-new --skip allocation_free --test-threads 1 --nocapture
    step ahead 100 ./gpu_ahead-new --test-threads 1 --nocapture
    step fuse-real 200 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-new real_model --test-threads 1 --nocapture
    grep -hE "^test |chat |top-1|rc=|panicked|test result" $OUT/decode.log $OUT/ahead.log $OUT/fuse-real.log | cut -c1-200
    [ -f $W/smollm2.bundle ] || step build 60 ./tether-new build --family llm --gguf $G -o $W/smollm2.bundle
    for i in 1 2; do
      step bench-main 100 env TETHER_LLM_LAYER_TAIL=0 TETHER_LLM_LAYER_KERNEL_BELOW=1536 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
      step bench-new 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    done
    step bench-greedy 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3 --temperature 0
    llamacpp $AT
    for at in 128 2048; do step itl-$at 90 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $at --n-gen 128 --runs 40; done
    for i in 1 2; do step text 30 ./tether-new run $W/smollm2.bundle --device cuda --prompt "Write a haiku about the sea." --seed 7 --max-tokens 48 --json; done
    for f in bench-main bench-new bench-greedy itl-128 itl-2048; do echo "== $f"; grep -E "tg128|inter-token @|launches per|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
    grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
    grep -hoE '"text": *"[^"]{0,120}' $OUT/text.log
  fi
  cd $R ;;
alloc)
  gguf
  cd $B
  step alloc 400 env TETHER_ASSETS=$W/assets ./gpu_decode-new decode_is_allocation_free --test-threads 1 --nocapture
  step fuse 150 ./gpu_fuse-new --skip speeds --test-threads 1 --nocapture
  grep -hE "^test |tokens in|differ|rc=|panicked|test result" $OUT/alloc.log $OUT/fuse.log | cut -c1-260
  cd $R ;;
pack)
  (cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log) ;;
*) echo "usage: $0 unpack | fuse | decode | real | fuse2 | real2 | final | alloc | pack ..." >&2; exit 2 ;;
esac
done
