#!/usr/bin/env bash
# Issue 26, session 47 (docs/evidence/llm-gpu.md, last section): the decode step's merged
# layers in one launch of one block per SM (`layers_grid`, `TETHER_LLM_GRID=1`) beside the
# layer kernel. Calls that ran (all from a sparse checkout of runtime/gpu/):
#   2 (H100)  carry .device/s46i1 .device/s47g:  bash runtime/gpu/s46-h200.sh unpack;
#             /tmp/s46b/s47-grid                    (the step `grid` runs the same)
#   3 (H200)  the first version (barriers) and main's gpu_fuse:  unpack equal speed
#   8 (H100)  the second (tagged words) and main's gpu_fuse:    unpack equal speed prof
#   12 (H100) 7793f5b's gpu_fuse (carry .device/s47b):          unpack equal speed
#   13 (H100) e52e015's gpu_fuse (carry .device/s47d):          unpack stage
# (steps `equal` and `speed` as of each call: call 12's ran `equal` a second time with
# TETHER_LLM_GRID_COOP=0, a switch of that build; calls 3 and 8 timed main's gpu_fuse-main
# where `speed` now times the branch's binary without TETHER_LLM_GRID.) The step `real` (the
# GGUF in parts, tether bench and inter-token latency) did not run: no device time was left.
# Files (built on the development VM, stripped, xz) in .device folders:
#   gpu_fuse-grid.xz  the branch's gpu_fuse (`cargo test --release -p tether-llm --features
#                     cuda,build,cli --no-run`)
#   tether-grid.xz    the branch's tether (`cargo build --release --bin tether`)
#   part0?            SmolLM2-135M-Instruct.Q4_1.gguf in parts (`split -b 34000000`)
#   s47-grid          runtime/gpu/s47-grid.cu (nvcc -arch=sm_90 -O3 -std=c++17)
# Steps:
#   unpack  as s46-h200.sh's
#   grid    the barrier microbenchmark
#   equal   the bit-equality tests with TETHER_LLM_GRID=1
#   speed   the speed tests: the binary without TETHER_LLM_GRID (the layer kernel), then with
#   stage   the speed of layers_grid with 0, 192, 320 staged cache rows beside the layer kernel
#   real    the real model: equality, tether bench main / grid, inter-token latency
#   prof    ncu of one layers_grid launch: warp stalls by source line
set -u
R=$(pwd); B=/tmp/s46b
T0=$(date +%s)
left() { echo $(( ${LIMIT:-560} - ($(date +%s) - T0) )); }
step() { local name=$1 tmo=$2; shift 2; local l; l=$(left); [ "$l" -lt 30 ] && { echo "skipped (time): $*" >> $OUT/$name.log; return; }; [ "$tmo" -gt "$l" ] && tmo=$l; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$name.log; }
export TETHER_FUSE_AT=${TETHER_FUSE_AT:-128,1024,2048}
for s in "$@"; do
case "$s" in
unpack) bash $R/runtime/gpu/s46-h200.sh unpack ;;
grid) step grid 60 $B/s47-grid ;;
equal)
  cd $B
  step equal 90 env TETHER_LLM_GRID=1 ./gpu_fuse-grid layer_kernel --test-threads 1 --nocapture
  grep -hE "^test |differ|launches|rc=|panicked|error" $OUT/equal.log | cut -c1-220
  cd $R ;;
speed)
  cd $B
  step speed-main 150 ./gpu_fuse-grid fused_and_unfused_step_speeds --test-threads 1 --nocapture
  step speed-grid 150 env TETHER_LLM_GRID=1 ./gpu_fuse-grid fused_and_unfused_step_speeds --test-threads 1 --nocapture
  for v in main grid; do echo "== $v"; grep -hE "tg128@|rc=" $OUT/speed-$v.log | sed -E 's/SmolLM2 shape, 30 layers Q4_1, //; s/launches per token.*\) //' | cut -c1-160; done
  cd $R ;;
real)
  # The real model (SmolLM2-135M-Instruct Q4_1): its parts into the GGUF, the three decoders
  # and layers_grid's equal bit for bit, `tether bench` alternating main's default decoder
  # and TETHER_LLM_GRID=1 over the usual depths, then each at 128 with 40 runs (5,120
  # intervals: inter-token p99.9 / p50).
  W=/tmp/s46w; G=$W/assets/SmolLM2-135M-Instruct.Q4_1.gguf; AT=128,512,1024,1536,2048
  cat $W/part0? > $G
  (cd $W/assets && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c) >> $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
  cd $B
  step realeq 150 env TETHER_FUSE_REAL=1 TETHER_LLM_GRID=1 TETHER_ASSETS=$W/assets ./gpu_fuse-grid real_model --test-threads 1 --nocapture
  step build 60 ./tether-grid build --family llm --gguf $G -o $W/smollm2.bundle
  for i in $(seq ${ROUNDS:-2}); do
    step bench-main 100 ./tether-grid bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
    step bench-grid 100 env TETHER_LLM_GRID=1 ./tether-grid bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  done
  step itl-grid 60 env TETHER_LLM_GRID=1 ./tether-grid bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 40
  step itl-main 60 ./tether-grid bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 40
  grep -hE "^test |differ|launches|rc=|panicked" $OUT/realeq.log | cut -c1-200
  for f in bench-main bench-grid itl-grid itl-main; do echo "== $f"; grep -E "tg128|pp128|inter-token|p99|rc=" $OUT/$f.log | cut -c1-200; done
  cd $R ;;
stage)
  # layers_grid's staged cache rows: main's layer kernel, then TETHER_LLM_GRID_STAGE rows of
  # 0, 192 (the default) and 320; the layer kernel's variant of the speed test alone.
  cd $B
  export TETHER_FUSE_AT=128,512,1024,1536 TETHER_FUSE_VARIANTS=2
  step stage-main 100 ./gpu_fuse-grid fused_and_unfused_step_speeds --test-threads 1 --nocapture
  for r in 0 192 320; do step stage-$r 100 env TETHER_LLM_GRID=1 TETHER_LLM_GRID_STAGE=$r ./gpu_fuse-grid fused_and_unfused_step_speeds --test-threads 1 --nocapture; done
  step stage-main 100 ./gpu_fuse-grid fused_and_unfused_step_speeds --test-threads 1 --nocapture
  for v in main 0 192 320; do echo "== $v"; grep -hE "tg128@|rc=" $OUT/stage-$v.log | grep -v unfused | sed -E 's/SmolLM2 shape, 30 layers Q4_1, //; s/launches per token.*\) //' | cut -c1-160; done
  cd $R ;;
prof)
  # Nsight Compute on one layers_grid launch (the layer kernel's variant of the speed test,
  # teacher forcing near position 30; --launch-skip 30): warp stalls by source line. The
  # images' line info names /work/main/families/llm/kernels/llm.cu: linked to this tree.
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu | head -1)
  mkdir -p /work; [ -e /work/main ] || ln -s $R /work/main
  cd $B
  step prof 300 env TETHER_FUSE_AT=128 TETHER_LLM_GRID=1 $NCU --graph-profiling node -k regex:^layers_grid$ --launch-skip ${SKIP:-30} --launch-count 1 --section WarpStateStats --section SourceCounters --section SpeedOfLight --section LaunchStats --section Occupancy --import-source yes -o $OUT/g128 ./gpu_fuse-grid fused_and_unfused_step_speeds --test-threads 1
  $NCU -i $OUT/g128.ncu-rep --page source --csv --print-source cuda > $OUT/g128-cuda.csv 2>&1
  $NCU -i $OUT/g128.ncu-rep --page source --csv --print-source sass > $OUT/g128-sass.csv 2>&1
  $NCU -i $OUT/g128.ncu-rep --page details > $OUT/g128-details.txt 2>&1
  xz -9 $OUT/g128-sass.csv
  xz -9 $OUT/g128-cuda.csv
  tail -3 $OUT/prof.log; grep -E "Duration|Registers|Warp Cycles Per Issued|Elapsed Cycles" $OUT/g128-details.txt | head
  cd $R ;;
*) echo "usage: $0 unpack | grid | equal | speed | prof ..." >&2; exit 2 ;;
esac
done
