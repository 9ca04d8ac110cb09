#!/usr/bin/env bash
# Issue 26, session 51 (docs/evidence/llm-gpu.md, session 51; `prof` ran once, on an H100:
# its summary printed ncu's nanoseconds as "us" then, since mended; the 2,048 window fell in
# the unfused baseline's steps): where a decode step's time
# goes with today's default decoder, kernel by kernel, on the synthetic SmolLM2 shape
# (`gpu_fuse`'s speed test, one binary, no GGUF), and on an H200 session 49's `final`.
# Files (built on the development VM, stripped, xz), carried in .device folders (lib.sh's
# `unpack`): gpu_fuse-new.xz (`cargo test --release -p tether-llm --features cuda,build,cli
# --no-run`), for `final` also s49-h200.sh's binaries and the GGUF's parts.
# Steps:
#   unpack  lib.sh's
#   prof    Nsight Compute's duration of each kernel of the decode step, each launched alone
#           (`--graph-profiling node`: the graph's nodes one at a time, so without the
#           programmatic dependent launches' overlap), caches and clocks left as they run
#           (`--cache-control none --clock-control none`); about ten steps of the default
#           decoder inside its timed runs (the matching launches before them skipped) at
#           position 128 (the layer kernel's graph) and at 2,048 (the tails' graph); then the
#           same speed test without the profiler for the step time beside them
#   final   on an H200 only: session 49's `final` (runtime/gpu/s49-h200.sh)
#   pack    the logs into logs.tar.xz
set -u
source "$(dirname "$0")/lib.sh"
for s in "$@"; do
case "$s" in
unpack) unpack ;;
prof)
  cd $B
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for at in 128 2048; do
    step ncu-$at 200 $NCU --graph-profiling node --cache-control none --clock-control none \
      --metrics gpu__time_duration.sum \
      -k 'regex:^(embed|layer|prep_matvec|prep_matvec_wide|qkv_rope|attention_cluster|sample_advance)$' \
      --launch-skip 3000 --launch-count 340 --csv --page raw --log-file $OUT/ncu-$at.csv \
      env TETHER_FUSE_AT=$at TETHER_FUSE_VARIANTS=5 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
  done
  step speed 150 env TETHER_FUSE_AT=128,2048 TETHER_FUSE_VARIANTS=5 ./gpu_fuse-new fused_and_unfused_step_speeds --test-threads 1 --nocapture
  grep -hE "tg128@|rc=" $OUT/speed.log | cut -c1-200
  for at in 128 2048; do
    echo "== ncu at $at"; tail -n +2 $OUT/ncu-$at.csv 2>/dev/null | head -3 | cut -c1-300
    python3 - "$OUT/ncu-$at.csv" <<'PY' || true
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
rows = rows[next(i for i, r in enumerate(rows) if "Kernel Name" in r):]  # after ==PROF== lines
h = rows[0]; k = h.index("Kernel Name"); m = h.index("gpu__time_duration.sum")
unit = rows[1][m] if len(rows) > 1 else ""   # --page raw: the units row follows the header
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1.0)
t = collections.defaultdict(list)
for r in rows[2:]:
    try:
        t[r[k]].append(float(r[m].replace(",", "")) * scale)
    except (ValueError, IndexError):
        pass
for name, xs in t.items():
    xs.sort()
    print(f"{name:24s} n={len(xs):4d} median {xs[len(xs)//2]:8.2f} us  mean {sum(xs)/len(xs):8.2f}  min {xs[0]:8.2f}  max {xs[-1]:8.2f}")
PY
  done
  cd $R ;;
final)
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    LIMIT=$(left) bash $R/runtime/gpu/s49-h200.sh final
  else
    echo "final: not an H200 ($(nvidia-smi --query-gpu=name --format=csv,noheader)), skipped" | tee -a $OUT/host.log
  fi ;;
pack)
  (cd $OUT && tar cJf logs.tar.xz *.log *.csv 2>/dev/null && rm -f *.log *.csv) ;;
*) echo "usage: $0 unpack | prof | final | pack ..." >&2; exit 2 ;;
esac
done
