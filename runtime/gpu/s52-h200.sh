#!/usr/bin/env bash
# Issue 26, session 52 (docs/evidence/llm-gpu.md, session 52): the head as
# `prep_matvec_group` (a row per 8-lane group, four rows a warp in flight, no shuffles of the
# blocks' terms; off by default, TETHER_LLM_MATVEC_GROUP=1 takes it, =0 session 51's
# `prep_matvec`) on the synthetic
# SmolLM2 shape and the real model, and the decoder's evidence on the H200 (the figures of
# record there were session 48's decoder): correctness, decode beside llama.cpp and PyTorch in
# the same call, inter-token latency, 100,000 tokens allocation-free. Not run in session 52:
# no machine ran a step (ten requests got none; the one that started was taken back before it
# finished). The plan, carries with a sparse checkout of runtime/gpu/ (the tracked tree
# counts against the 64 MiB): 1. gpu_fuse + gpu_ahead + part00: `unpack syn prof pack`;
# 2. part01 + gpu_decode + tether: `unpack`; 3. part02 + llama-bench + the gguf wheel:
# `unpack real alloc pack`.
# Files (built on the development VM, stripped, xz), carried in .device folders over
# consecutive calls while the host is warm (lib.sh's `unpack`; the wheel copied as is):
#   gpu_fuse-new.xz, gpu_decode-new.xz, gpu_ahead-new.xz   `cargo test --release -p tether-llm
#                      --features cuda,build,cli --no-run`
#   tether-new.xz      `cargo build --release --features cuda --bin tether`
#   part0?             SmolLM2-135M-Instruct.Q4_1.gguf in parts (`split -b 33000000`)
#   llama-bench-sm90.xz  runtime/gpu/llamacpp-cuda-offline.sh's llama-bench
#   gguf-0.19.0-py3-none-any.whl  for transformers' GGUF loader (peer_llm.py)
# Steps:
#   unpack  lib.sh's
#   syn     gpu_fuse but its speed test (every decoder bit-equal to the unfused step, whose
#           head is `prep` + `matvec`), gpu_ahead; the speed test at 128, 512, 1,024, 2,048
#           for the default decoder and the fused step, the group head on and off, ROUNDS
#           rounds (2 by default)
#   prof    Nsight Compute: the head alone (`--graph-profiling node`), 20 launches of each
#           form, then one launch of each with `--set full` (stall reasons, memory)
#   real    the GGUF: gpu_decode (but the allocation test), gpu_fuse's real-model case;
#           `tether bench` of session 48's decoder (TETHER_LLM_LAYER_TAIL=0
#           TETHER_LLM_LAYER_KERNEL_BELOW=1536, the group head off), session 51's (the group
#           head off) and the default, alternating (2 rounds); greedy; llama-bench; inter-token
#           latency at 128 and 2,048 (5,120 intervals each); sampled text twice; the PyTorch
#           peers (eager `generate`, static cache + compile)
#   alloc   gpu_decode's 100,000-token allocation test
#   pack    the logs into logs.tar.xz
set -u
source "$(dirname "$0")/lib.sh"
AT=128,256,512,768,1024,1536,2048
for s in "$@"; do
case "$s" in
unpack) unpack ;;
syn)
  cd $B
  step fuse 200 env TETHER_LLM_MATVEC_GROUP=1 ./gpu_fuse-new --skip speeds --test-threads 1 --nocapture
  step ahead 100 env TETHER_LLM_MATVEC_GROUP=1 ./gpu_ahead-new --test-threads 1 --nocapture
  for i in $(seq ${ROUNDS:-2}); do
    for g in 0 1; do
      step speed-group$g 120 env TETHER_LLM_MATVEC_GROUP=$g TETHER_FUSE_AT=128,512,1024,2048 TETHER_FUSE_VARIANTS=1,5 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
    done
  done
  grep -hE "^test |differ|rc=|panicked|test result" $OUT/fuse.log $OUT/ahead.log | cut -c1-200
  for g in 0 1; do echo "== group $g"; grep -hE "tg128@|rc=" $OUT/speed-group$g.log | sed -E 's/SmolLM2 shape, 30 layers Q4_1, //' | cut -c1-200; done
  cd $R ;;
prof)
  cd $B
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for g in 0 1; do
    step ncu-head$g 100 $NCU --graph-profiling node --cache-control none --clock-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum \
      -k 'regex:^prep_matvec(_group)?$' --launch-skip 200 --launch-count 20 --csv --page raw \
      --log-file $OUT/ncu-head$g.csv \
      env TETHER_LLM_MATVEC_GROUP=$g TETHER_FUSE_AT=128 TETHER_FUSE_VARIANTS=5 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
    step ncu-full$g 100 $NCU --graph-profiling node --set full --cache-control none --clock-control none \
      -k 'regex:^prep_matvec(_group)?$' --launch-skip 200 --launch-count 1 --page details \
      --log-file $OUT/ncu-full$g.log \
      env TETHER_LLM_MATVEC_GROUP=$g TETHER_FUSE_AT=128 TETHER_FUSE_VARIANTS=5 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
    python3 $R/runtime/gpu/ncu_sum.py $OUT/ncu-head$g.csv 2>&1 | head -8
    grep -E "Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Stall|L2 Hit" $OUT/ncu-full$g.log | head -24
  done
  cd $R ;;
real)
  gguf
  cd $B
  sha256sum tether-new gpu_*-new >> $OUT/host.log 2>&1
  export TETHER_LLM_MATVEC_GROUP=1
  step decode 200 env TETHER_ASSETS=$W/assets ./gpu_decode-new --skip allocation_free --test-threads 1 --nocapture
  step fuse-real 200 env TETHER_FUSE_REAL=1 TETHER_ASSETS=$W/assets ./gpu_fuse-new real_model --test-threads 1 --nocapture
  grep -hE "^test |chat |top-1|differ|rc=|panicked|test result" $OUT/decode.log $OUT/fuse-real.log | cut -c1-200
  [ -f $W/smollm2.bundle ] || step build 60 ./tether-new build --family llm --gguf $G -o $W/smollm2.bundle
  for i in 1 2; do
    step bench-s48 100 env TETHER_LLM_MATVEC_GROUP=0 TETHER_LLM_LAYER_TAIL=0 TETHER_LLM_LAYER_KERNEL_BELOW=1536 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-s51 100 env TETHER_LLM_MATVEC_GROUP=0 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-new 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  step bench-greedy 100 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3 --temperature 0
  llamacpp $AT
  for at in 128 2048; do step itl-$at 90 ./tether-new bench $W/smollm2.bundle --device cuda --n-prompt $at --n-gen 128 --runs 40; done
  for i in 1 2; do step text 30 ./tether-new run $W/smollm2.bundle --device cuda --prompt "Write a haiku about the sea." --seed 7 --max-tokens 48 --json; done
  for f in bench-s48 bench-s51 bench-new bench-greedy itl-128 itl-2048; do echo "== $f"; grep -E "tg128|pp128|first token|inter-token @|launches per|rc=" $OUT/$f.log | grep -v "no step" | cut -c1-200; done
  grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
  grep -hoE '"text": *"[^"]{0,120}' $OUT/text.log
  cd $W
  python3 -c "import gguf" 2>/dev/null || { mkdir -p /tmp/pylib && (cd /tmp/pylib && python3 -m zipfile -e $B/gguf-0.19.0-py3-none-any.whl .); export PYTHONPATH=/tmp/pylib; }
  step peers 200 python3 $R/runtime/gpu/peer_llm.py $G eager,static_compile
  grep -hE "tok_s|ttft|rc=|failed" $OUT/peers.log | cut -c1-250 | tail -8
  unset TETHER_LLM_MATVEC_GROUP
  cd $R ;;
alloc)
  gguf
  cd $B
  step alloc 200 env TETHER_LLM_MATVEC_GROUP=1 TETHER_ASSETS=$W/assets ./gpu_decode-new decode_is_allocation_free --test-threads 1 --nocapture
  grep -hE "^test |tokens in|rc=|panicked|test result" $OUT/alloc.log | cut -c1-260
  cd $R ;;
pack)
  (cd $OUT && tar cJf logs.tar.xz *.log *.csv 2>/dev/null && rm -f *.log *.csv) ;;
*) echo "usage: $0 unpack | syn | prof | real | alloc | pack ..." >&2; exit 2 ;;
esac
done
