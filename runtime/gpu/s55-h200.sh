#!/usr/bin/env bash
# Issue 26, session 55 (docs/evidence/llm-gpu.md, session 55): main's default decoder (the
# group head, default since session 54) on the real model beside llama.cpp and PyTorch in one
# call, the one-row head (`TETHER_LLM_MATVEC_GROUP=0`) alternating with it, session 48's
# decoder once; then the test binaries (bits, greedy and sampled text, 100,000 tokens) on the
# same host. Three calls, from a sparse checkout of runtime/gpu/ (the GGUF xz-compressed and
# split in two as in s54-h200.sh):
#   1. .device/s55x (part00)                                         `unpack`
#   2. .device/s55y (part01, tether-new.xz, llama-bench-sm90.xz, gguf wheel, COMMIT)
#                                                                    `unpack real pack`
#   3. .device/s55z (gpu_decode-new.xz, gpu_fuse-new.xz, gpu_ahead-new.xz, COMMIT)
#                                                                    `unpack tests pack`
#   4. .device/s55p (gpu_sample-new.xz)                             `unpack prof pack`
# Steps:
#   unpack  lib.sh's
#   real    the GGUF from its xz parts (SHA-256 checked); `tether bench` of the default and
#           the one-row head alternating (2 rounds); three prompts' greedy text (64 tokens);
#           llama-bench; the PyTorch peers (eager `generate`, static cache + compile);
#           inter-token latency at 128 and 2,048 (5,120 intervals each); sampled text twice;
#           greedy bench; session 48's decoder last
#   tests   gpu_decode (llama.cpp's and the CPU engine's tokens and logits, 100,000 tokens),
#           gpu_fuse (every fused decoder's logits against the unfused step; the real
#           model's; the step speeds at 128 and 2,048), gpu_ahead (host time a token)
#   prof    the device sampler alone under Nsight Compute (`gpu_sample`'s timing test, 49,152
#           spread logits, llama.cpp's defaults, then greedy): warp states and each SASS
#           instruction's executions and stall samples (a sample every 32 cycles; call 4
#           ran without --warp-sampling-interval 0), for the sampler's cost over greedy
#   sample  (calls 5-7, carrying .device/s55a: part00 of a 50,000,000-byte split + the new
#           gpu_sample; s55b: part01 + main's tether as tether-old; s55c: the new tether as
#           tether-s55 + main's gpu_sample as gpu_sample-old; `unpack sample`, `unpack`,
#           `unpack ab`) the sampler's passes with fewer instructions: gpu_sample (the
#           device sampler against the CPU sampler on six logit shapes) with the new kernels
#   ab      gpu_sample's timing test, main's and the new alternating; `tether bench` of
#           main's and the new alternating (2 rounds, llama.cpp's sampling defaults), greedy
#           once each; three prompts' greedy text and the seeded text with the new
#   syn     the synthetic-model GPU tests carried (*-fin: gpu_share, gpu_numerics,
#           gpu_prefill, gpu_sample) and not yet run; binaries named *-fin are main's head
#   final   the real-model tests of main's head carried (gpu_decode with 100,000 tokens,
#           gpu_fuse and its real-model case, gpu_ahead), `tether bench` and greedy text once
#           where tether-fin is carried
#   pack    the logs into logs.tar.xz
set -u
source "$(dirname "$0")/lib.sh"
AT=128,256,512,768,1024,1536,2048
for s in "$@"; do
case "$s" in
unpack) unpack ;;
real)
  [ -f $G ] || cat $W/part0? | xz -dc > $G
  gguf
  cd $B
  sha256sum tether-new >> $OUT/host.log 2>&1
  [ -f $W/smollm2.bundle ] || step build 60 ./tether-new build --family llm --gguf $G -o $W/smollm2.bundle
  for i in 1 2; do
    step bench-default 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-row 100 env TETHER_LLM_MATVEC_GROUP=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  for p in "Where is Paris?" "Write a haiku about the sea." "What is 2+2?"; do
    step greedy 30 ./tether-new run $W/smollm2.bundle --device cuda --prompt "$p" --temperature 0 --max-tokens 64 --json
  done
  llamacpp $AT
  cd $W
  python3 -c "import gguf" 2>/dev/null || { mkdir -p /tmp/pylib && (cd /tmp/pylib && python3 -m zipfile -e $B/gguf-0.19.0-py3-none-any.whl .); export PYTHONPATH=/tmp/pylib; }
  step peers 200 python3 $R/runtime/gpu/peer_llm.py $G eager,static_compile
  cd $B
  for at in 128 2048; do step itl-$at 90 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $at --n-gen 128 --runs 40; done
  for i in 1 2; do step text 30 ./tether-new run $W/smollm2.bundle --device cuda --prompt "Write a haiku about the sea." --seed 7 --max-tokens 48 --json; done
  step bench-greedy 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3 --temperature 0
  step bench-s48 100 env TETHER_LLM_LAYER_TAIL=0 TETHER_LLM_LAYER_KERNEL_BELOW=1536 TETHER_LLM_MATVEC_GROUP=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  for f in bench-default bench-row bench-greedy bench-s48 itl-128 itl-2048; do echo "== $f"; grep -E "tg128|pp128|first token|inter-token @|launches per|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
  grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
  echo "== greedy"; grep -hoE '"text": *"[^"]{0,100}' $OUT/greedy.log
  grep -hoE '"text": *"[^"]{0,120}' $OUT/text.log
  grep -hE "tok_s|ttft|rc=|failed" $OUT/peers.log | cut -c1-250 | tail -8
  cd $R ;;
tests)
  gguf
  cd $B
  step decode 300 env TETHER_ASSETS=$W/assets ./gpu_decode-new --test-threads 1 --nocapture
  step fuse 100 ./gpu_fuse-new --skip speeds --test-threads 1 --nocapture
  step fuse-real 60 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-new real_model --test-threads 1 --nocapture
  step speed 60 env TETHER_FUSE_AT=128,2048 TETHER_FUSE_VARIANTS=1,5 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
  step ahead 60 env TETHER_ASSETS=$W/assets ./gpu_ahead-new --test-threads 1 --nocapture
  for f in decode fuse fuse-real speed ahead; do echo "== $f"; grep -E "test result|allocations|free memory|host time|differ|FAILED|panicked|rc=" $OUT/$f.log | cut -c1-200 | tail -12; done
  cd $R ;;
prof)
  cd $B
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  # gpu_sample's timing test: 50 calls a parameter set; set 3 (llama.cpp's defaults) is
  # calls 100-149 at 49,152 logits, set 1 (greedy) calls 0-49.
  for c in defaults:110 greedy:10; do
    step ncu-${c%%:*} 150 $NCU --cache-control none --clock-control none -k 'regex:^sample_advance$' \
      --launch-skip ${c##*:} --launch-count 1 --warp-sampling-interval 0 --section SpeedOfLight --section WarpStateStats \
      --section SourceCounters --section LaunchStats --section Occupancy -o $OUT/sample-${c%%:*} \
      ./gpu_sample-new device_sampler_time --test-threads 1 --nocapture
    step src-${c%%:*} 60 $NCU --import $OUT/sample-${c%%:*}.ncu-rep --page source --csv --print-source sass
    step details-${c%%:*} 60 $NCU --import $OUT/sample-${c%%:*}.ncu-rep --page details
  done
  for c in defaults greedy; do echo "== $c"; grep -E "Duration|Registers Per|Achieved Occ|Stall|Warp Cycles Per Issued" $OUT/details-$c.log | head -20; done
  wc -l $OUT/src-*.log
  cd $R ;;
sample)
  cd $B
  step sample 200 ./gpu_sample-new --test-threads 1 --nocapture
  grep -E "^test |test result|us per call|differ|rc=" $OUT/sample.log | cut -c1-200 | tail -40
  cd $R ;;
ab)
  [ -f $G ] || cat $W/part0? | xz -dc > $G
  gguf
  cd $B
  sha256sum tether-old tether-s55 >> $OUT/host.log 2>&1
  [ -f $W/smollm2.bundle ] || step build 60 ./tether-s55 build --family llm --gguf $G -o $W/smollm2.bundle
  for i in 1 2; do
    for b in gpu_sample-old gpu_sample-new; do step time-$b 60 ./$b device_sampler_time --test-threads 1 --nocapture; done
  done
  for i in 1 2; do
    for b in tether-old tether-s55; do step bench-$b 100 ./$b bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3; done
  done
  for b in tether-old tether-s55; do step greedy-$b 100 ./$b bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3 --temperature 0; done
  for p in "Where is Paris?" "Write a haiku about the sea." "What is 2+2?"; do
    step text-greedy 30 ./tether-s55 run $W/smollm2.bundle --device cuda --prompt "$p" --temperature 0 --max-tokens 64 --json
  done
  for b in tether-old tether-s55; do step text-$b 30 ./$b run $W/smollm2.bundle --device cuda --prompt "Write a haiku about the sea." --seed 7 --max-tokens 48 --json; done
  for f in bench-tether-old bench-tether-s55 greedy-tether-old greedy-tether-s55; do echo "== $f"; grep -E "tg128@|rc=" $OUT/$f.log | awk '{print $1, $4}' | paste -sd' '; done
  for b in gpu_sample-old gpu_sample-new; do echo "== $b"; grep -E "n 49152 (greedy|defaults):|n 151936 defaults:" $OUT/time-$b.log; done
  grep -hoE '"text": *"[^"]{0,100}' $OUT/text-*.log
  cd $R ;;
syn)
  cd $B
  for t in gpu_share gpu_numerics gpu_prefill gpu_sample; do
    [ -x ./$t-fin ] && [ ! -f $B/.ran-$t ] && { step $t 200 ./$t-fin --test-threads 1 --nocapture; touch $B/.ran-$t; }
  done
  grep -hE "^test |test result|rc=" $OUT/gpu_*.log | cut -c1-160
  cd $R ;;
final)
  [ -f $G ] || cat $W/part0? | xz -dc > $G
  gguf
  cd $B
  # Each binary only where carried (the device time left may not carry them all).
  [ -x ./gpu_decode-fin ] && step decode 300 env TETHER_ASSETS=$W/assets ./gpu_decode-fin --test-threads 1 --nocapture
  [ -x ./gpu_fuse-fin ] && step fuse 100 ./gpu_fuse-fin --skip speeds --test-threads 1 --nocapture
  [ -x ./gpu_fuse-fin ] && step fuse-real 60 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-fin real_model --test-threads 1 --nocapture
  [ -x ./gpu_ahead-fin ] && step ahead 60 env TETHER_ASSETS=$W/assets ./gpu_ahead-fin --test-threads 1 --nocapture
  if [ -x ./tether-fin ]; then
    [ -f $W/smollm2.bundle ] || step build 60 ./tether-fin build --family llm --gguf $G -o $W/smollm2.bundle
    step bench 100 ./tether-fin bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    for p in "Where is Paris?" "Write a haiku about the sea." "What is 2+2?"; do
      step greedy 30 ./tether-fin run $W/smollm2.bundle --device cuda --prompt "$p" --temperature 0 --max-tokens 64 --json
    done
  fi
  for f in decode fuse fuse-real ahead; do echo "== $f"; grep -E "test result|allocations|host time|differ|FAILED|panicked|rc=" $OUT/$f.log 2>/dev/null | cut -c1-200 | tail -8; done
  grep -E "tg128@|rc=" $OUT/bench.log 2>/dev/null | awk '{print $1, $4}' | paste -sd' '
  grep -hoE '"text": *"[^"]{0,80}' $OUT/greedy.log 2>/dev/null
  cd $R ;;
pack)
  (cd $OUT && tar cJf logs.tar.xz *.log 2>/dev/null && rm -f *.log) ;;
*) echo "usage: $0 unpack | real | tests | prof | sample | ab | syn | final | pack ..." >&2; exit 2 ;;
esac
done
