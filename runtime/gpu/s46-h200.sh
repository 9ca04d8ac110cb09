#!/usr/bin/env bash
# Issue 26, session 46 (ran on an H100; docs/evidence/llm-gpu.md, session 46):
#  - `attention_cluster` (the fused step's attention, the default decoder's from position
#    1,536) loading each thread's value rows before the scores (ATT_VPRE rows into registers,
#    step 0 of the kernel; branch `s46-vearly`, 6461fa4, not merged) instead of in step 4's
#    turns of 16: the same operations in the same order, so the same bits;
#  - inter-token latency of main's decoder over 5,120 intervals a line.
# Files, built on the development VM (untracked, stripped, xz), carried in .device folders:
#   gpu_fuse-main.xz   main's kernels (37ad988) with gpu_fuse.rs's TETHER_FUSE_AT (the speed
#                      test's positions)
#   gpu_fuse-v64.xz    the branch's kernels, ATT_VPRE 64 (the branch's default)
#   gpu_fuse-v32.xz    the same with ATT_VPRE 32
#                      (each `cargo test --release -p tether-llm --features cuda,build,cli --no-run`)
#   tether-main.xz     `cargo build --release --bin tether` of 37ad988
#   part0?             SmolLM2-135M-Instruct.Q4_1.gguf in parts (`split -b 34000000`)
#   llama-bench-sm90.xz  runtime/gpu/llamacpp-cuda-offline.sh's llama-bench
#   COMMIT             the commit the binaries are of
# Steps (several per call, in order):
#   unpack   what this call carried: `*.xz` into $B (llama-bench kept packed), part0? into $W
#   kernels  speed tests (SmolLM2 shape, synthetic weights) main / v64 / v32, the branch's
#            bit-equality tests (gpu_fuse without the speed test), one more speed round
#   itl      main's `tether bench` at 128 with 40 runs (5,120 intervals), ROUNDS rounds and
#            one pinned to a core; the usual depths once, llama-bench beside where carried
#   prof     ncu --set full of main's attention_cluster at position 2,048 (gpu_fuse-main;
#            not run: no device was lent for it)
# e.g. carry .device/s46a:  bash runtime/gpu/s46-h200.sh unpack kernels
# Logs under $OUT.
set -u
R=$(pwd); W=/tmp/s46w; B=/tmp/s46b; mkdir -p $W/assets $B
G=$W/assets/SmolLM2-135M-Instruct.Q4_1.gguf
T0=$(date +%s)
left() { echo $(( ${LIMIT:-560} - ($(date +%s) - T0) )); }
step() { local name=$1 tmo=$2; shift 2; local l; l=$(left); [ "$l" -lt 30 ] && { echo "skipped (time): $*" >> $OUT/$name.log; return; }; [ "$tmo" -gt "$l" ] && tmo=$l; echo "\$ $*" >> $OUT/$name.log; local t0=$(date +%s); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$name.log; }
AT=128,512,1024,1536,2048
export TETHER_FUSE_AT=128,1024,1536,2048
for s in "$@"; do
case "$s" in
unpack)
  for d in $R/.device/*/; do
    for f in $d*; do
      [ -f "$f" ] || continue
      case "$f" in
        */part0?) cp "$f" $W/ ;;
        */llama-bench*) cp "$f" $B/ ;;
        *.xz) n=$(basename "$f" .xz); xz -dc "$f" > $B/$n && chmod +x $B/$n ;;
        *) cp "$f" $B/ ;;
      esac
    done
  done
  { date -u; hostname; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; cat $B/COMMIT 2>/dev/null; ls -l $W $B; } >> $OUT/host.log 2>&1
  ;;
kernels)
  cd $B
  sha256sum gpu_fuse-* >> $OUT/host.log 2>&1
  for v in main v64 v32; do step speed-$v 120 ./gpu_fuse-$v fused_and_unfused_step_speeds --test-threads 1 --nocapture; done
  step fuse-v64 300 ./gpu_fuse-v64 --skip speeds --test-threads 1 --nocapture
  for v in main v64 v32; do step speed-$v 120 ./gpu_fuse-$v fused_and_unfused_step_speeds --test-threads 1 --nocapture; done
  grep -hE "^test |differ|rc=|panicked" $OUT/fuse-v64.log | cut -c1-200
  for v in main v64 v32; do echo "== $v"; grep -hE "tg128@|rc=" $OUT/speed-$v.log | sed -E 's/SmolLM2 shape, 30 layers Q4_1, //; s/launches per token.*\) //' | cut -c1-150; done
  cd $R
  ;;
itl)
  # Inter-token latency of main's decoder on the real model: `tether bench` at position 128
  # with 40 runs of 128 tokens (5,120 intervals, so p99.9 is not one step), ROUNDS rounds,
  # then one more pinned to one CPU core (taskset); the usual depths once.
  cat $W/part0? > $G
  (cd $W/assets && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c) >> $OUT/host.log 2>&1 || { cat $OUT/host.log; exit 3; }
  cd $B
  sha256sum tether-main >> $OUT/host.log 2>&1
  step build 60 ./tether-main build --family llm --gguf $G -o $W/smollm2.bundle
  for i in $(seq ${ROUNDS:-3}); do step itl 60 ./tether-main bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 40; done
  step itl-pinned 60 taskset -c 3 ./tether-main bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 40
  step bench 100 ./tether-main bench $W/smollm2.bundle --device cuda --n-prompt $AT --n-gen 128 --runs 3
  if [ -f $B/llama-bench-sm90.xz ]; then
    bash $R/runtime/gpu/llamacpp-cuda.sh prebuilt $B/llama-bench-sm90.xz > $OUT/llamacpp-prebuilt.log 2>&1
    SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
    step llamacpp 120 env LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64 /tmp/llamacpp/build/bin/llama-bench -m $G -ngl 99 -fa on -p 0 -n 128 -d $AT -r 5 -o md
  fi
  for f in $OUT/itl*.log $OUT/bench.log; do echo "== $(basename $f)"; grep -E "tg128|inter-token|slowest|rc=" $f | cut -c1-200; done
  grep -E "tg128|rc=" $OUT/llamacpp.log 2>/dev/null
  cd $R
  ;;
prof)
  # Nsight Compute on main's attention_cluster at position 2,048 (the speed test at that
  # position alone; its first 4,000 launches of the kernel, the load checks and the teacher
  # forcing among them, skipped; 3 profiled): stall reasons, memory, the source page.
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu | head -1)
  cd $B
  step prof 300 env TETHER_FUSE_AT=2048 $NCU --set full --import-source yes -k regex:^attention_cluster$ --launch-skip 4000 --launch-count 3 -o $OUT/att2048 ./gpu_fuse-main fused_and_unfused_step_speeds --test-threads 1
  $NCU -i $OUT/att2048.ncu-rep --page details > $OUT/att2048-details.txt 2>&1
  $NCU -i $OUT/att2048.ncu-rep --page source --csv --print-source sass > $OUT/att2048-source.csv 2>&1
  xz -9 $OUT/att2048-source.csv; rm -f $OUT/att2048.ncu-rep.xz
  ls -la $OUT; tail -3 $OUT/prof.log; grep -E "Duration|Registers|Achieved Occupancy|Warp Cycles Per Issued|Stall|L1/TEX Hit|L2 Hit" $OUT/att2048-details.txt | head -40
  cd $R
  ;;
*) echo "usage: $0 unpack | kernels | itl | prof ..." >&2; exit 2 ;;
esac
done
