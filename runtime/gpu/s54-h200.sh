#!/usr/bin/env bash
# Issue 26, session 54 (docs/evidence/llm-gpu.md, session 54): the default decoder of the time
# and session 52's group head (`TETHER_LLM_MATVEC_GROUP=1`) alternating on the real model
# beside llama.cpp and PyTorch in one call, session 48's decoder once, in two calls instead of
# s52-h200.sh's three (the session's device time allowed two): the GGUF carried xz-compressed
# (`xz -T2 -6`, 90,467,832 bytes) and split in two (`split -b 66500000 -d -a 2`), so that the
# second part travels with `tether`, llama-bench and the gguf wheel under 64 MiB. Carries
# from a sparse checkout of runtime/gpu/:
#   1. .device/s54x (part00)                                          `unpack`
#   2. .device/s54y (part01, tether-new.xz, llama-bench-sm90.xz, gguf wheel, COMMIT)
#                                                                     `unpack real pack`
# Steps:
#   unpack  lib.sh's
#   real    the GGUF from its xz parts (SHA-256 checked); `tether bench` of the default
#           decoder and the group head alternating (2 rounds); three prompts' greedy text
#           with the group head and without (the same text expected: the same bits by
#           construction; gpu_fuse, not carried, is the bit-wise check); llama-bench; the
#           PyTorch peers (eager `generate`, static cache + compile); inter-token latency at
#           128 and 2,048 (5,120 intervals each); sampled text twice; greedy bench; session
#           48's decoder (TETHER_LLM_LAYER_TAIL=0 TETHER_LLM_LAYER_KERNEL_BELOW=1536) last
#   pack    the logs into logs.tar.xz
# Ran once, on main at 2390246; from the next commit the group head is the default, so a
# re-run's `bench-default` is the group head too (TETHER_LLM_MATVEC_GROUP=0: the one-row head).
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
    step bench-group 100 env TETHER_LLM_MATVEC_GROUP=1 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  for p in "Where is Paris?" "Write a haiku about the sea." "What is 2+2?"; do
    for g in 0 1; do
      step greedy-group$g 30 env TETHER_LLM_MATVEC_GROUP=$g ./tether-new run $W/smollm2.bundle --device cuda --prompt "$p" --temperature 0 --max-tokens 64 --json
    done
  done
  llamacpp $AT
  cd $W
  python3 -c "import gguf" 2>/dev/null || { mkdir -p /tmp/pylib && (cd /tmp/pylib && python3 -m zipfile -e $B/gguf-0.19.0-py3-none-any.whl .); export PYTHONPATH=/tmp/pylib; }
  step peers 200 python3 $R/runtime/gpu/peer_llm.py $G eager,static_compile
  cd $B
  for at in 128 2048; do step itl-$at 90 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $at --n-gen 128 --runs 40; done
  for i in 1 2; do step text 30 ./tether-new run $W/smollm2.bundle --device cuda --prompt "Write a haiku about the sea." --seed 7 --max-tokens 48 --json; done
  step bench-greedy 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3 --temperature 0
  step bench-s48 100 env TETHER_LLM_LAYER_TAIL=0 TETHER_LLM_LAYER_KERNEL_BELOW=1536 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  for f in bench-default bench-group bench-greedy bench-s48 itl-128 itl-2048; do echo "== $f"; grep -E "tg128|pp128|first token|inter-token @|launches per|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
  grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
  for g in 0 1; do echo "== greedy group $g"; grep -hoE '"text": *"[^"]{0,100}' $OUT/greedy-group$g.log; done
  cmp <(grep -hoE '"text": *"[^"]*"' $OUT/greedy-group0.log) <(grep -hoE '"text": *"[^"]*"' $OUT/greedy-group1.log) && echo "greedy texts: group head equal to default"
  grep -hoE '"text": *"[^"]{0,120}' $OUT/text.log
  grep -hE "tok_s|ttft|rc=|failed" $OUT/peers.log | cut -c1-250 | tail -8
  cd $R ;;
pack)
  (cd $OUT && tar cJf logs.tar.xz *.log 2>/dev/null && rm -f *.log) ;;
*) echo "usage: $0 unpack | real | pack ..." >&2; exit 2 ;;
esac
done
