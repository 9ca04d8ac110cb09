#!/usr/bin/env bash
# Issue 26, session 56 (docs/evidence/llm-gpu.md, session 56): main's head on a GPU (the
# verification session 55 could not run) and where the layer kernel's time goes on the real
# model. Calls back to back from a sparse checkout of runtime/gpu/ (the GGUF xz-compressed and
# split in two as in s54-h200.sh; binaries of main's head named *-fin, s55-h200.sh's `final`):
#   1. .device/s56a (part00, gpu_decode-fin.xz)                      `unpack`
#   2. .device/s56b (part01, tether-fin.xz, COMMIT)                  `unpack final lprof pack`
#   3. .device/s56c (gpu_fuse-fin.xz, gpu_ahead-fin.xz, COMMIT)      `unpack final pack`
#   4. .device/s56d (llama-bench-sm90.xz, from .device/s55y)         `unpack beside pack`
#   5. .device/s56d (gguf-0.19.0-py3-none-any.whl)                   `unpack peers pack`
#   (calls 4-5 ran as the same commands given directly, on the host of calls 1-3)
# Steps:
#   unpack, pack  lib.sh's / s55-h200.sh's
#   final   s55-h200.sh's `final` (each carried *-fin binary: gpu_decode with 100,000 tokens,
#           gpu_fuse and its real-model case, gpu_ahead; `tether bench` and greedy text)
#   lprof   one launch of the layer kernel on the real model under Nsight Compute (`tether
#           bench` from 128 prompt tokens; the 2,001st `layer` launch: after the load check's,
#           one layer of a decode step of the warm-up run, a few dozen steps past position
#           128): warp states and each SASS instruction's executions and
#           stall samples (a sample every 32 cycles). `--graph-profiling node` runs it alone,
#           so the weight copies its dependent launch hides in the graph are in its time.
#           Mapped to source lines and phases by ncu_src_lines.py (on the development VM).
#   beside  main's `tether bench` twice, llama.cpp's decode between (call 4)
#   peers   the PyTorch peers, then `tether bench` at 128 and 2,048 (call 5)
set -u
source "$(dirname "$0")/lib.sh"
for s in "$@"; do
case "$s" in
unpack) unpack ;;
pack) bash $R/runtime/gpu/s55-h200.sh pack ;;
final) LIMIT=$(left) bash $R/runtime/gpu/s55-h200.sh final ;;
lprof)
  gguf
  cd $B
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -f $W/smollm2.bundle ] || step build 60 ./tether-fin build --family llm --gguf $G -o $W/smollm2.bundle
  step ncu-layer 200 $NCU --graph-profiling node --cache-control none --clock-control none \
    -k 'regex:^layer$' --launch-skip 2000 --launch-count 1 --warp-sampling-interval 0 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
    --section Occupancy --section MemoryWorkloadAnalysis -o $OUT/layer \
    ./tether-fin bench $W/smollm2.bundle --device cuda --n-prompt 128 --n-gen 128 --runs 1
  step src-layer 60 $NCU --import $OUT/layer.ncu-rep --page source --csv --print-source sass
  step details-layer 60 $NCU --import $OUT/layer.ncu-rep --page details
  grep -E "Duration|Registers Per|Achieved Occ|Stall|Warp Cycles Per Issued|Elapsed Cycles|SM Frequency" $OUT/details-layer.log | head -24
  python3 $R/runtime/gpu/ncu_src_regions.py $OUT/src-layer.log 16
  cd $R ;;
beside)
  # main's `tether` twice, llama.cpp's flash-attention decode between, at three depths.
  gguf
  cd $B
  for i in 1 2; do
    step bench 90 ./tether-fin bench $W/smollm2.bundle --device cuda --n-prompt 128,512,2048 --n-gen 128 --runs 3
    [ $i = 1 ] && llamacpp 128,512,2048
  done
  grep -E "tg128@|rc=" $OUT/bench.log | awk '{print $1, $4}' | paste -sd' '
  grep -E "tg128|rc=" $OUT/llamacpp.log
  cd $R ;;
peers)
  # PyTorch through transformers (eager `generate`; static cache + torch.compile), then
  # main's `tether` at 128 and 2,048 in the same call.
  gguf
  cd $W
  python3 -c "import gguf" 2>/dev/null || { mkdir -p /tmp/pylib && (cd /tmp/pylib && python3 -m zipfile -e $B/gguf-0.19.0-py3-none-any.whl .); export PYTHONPATH=/tmp/pylib; }
  step peers 230 python3 $R/runtime/gpu/peer_llm.py $G eager,static_compile
  cd $B
  step bench 40 ./tether-fin bench $W/smollm2.bundle --device cuda --n-prompt 128,2048 --n-gen 128 --runs 3
  grep -hE "tok_s|ttft|rc=|failed" $OUT/peers.log | cut -c1-250 | tail -8
  grep -E "tg128@|rc=" $OUT/bench.log | awk '{print $1, $4}' | paste -sd' '
  cd $R ;;
*) echo "usage: $0 unpack | final | lprof | beside | peers | pack ..." >&2; exit 2 ;;
esac
done
