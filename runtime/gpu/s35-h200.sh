#!/usr/bin/env bash
# Session 35 (issue 26, "Fast" without giving up "Correct"): the fused decode step with the
# whole-warp products (`row_dot_warp`) and the RMSNorm's tree-and-bound (`rms_scale_block`),
# checked bit for bit against the CPU engine and timed beside main's build, in one device call.
# Carried: .device/s35 with the stripped test binaries built on the development VM
# (`cargo test --release -p tether-llm --features cuda,build,cli --no-run`):
#   after:  new/gpu_numerics new/gpu_fuse new/gpu_prefill   (the commit under test)
#   before: main/gpu_fuse                                    (main's build)
# and runtime/gpu/ncu_sum.py. Run from the checkout: bash runtime/gpu/s35-h200.sh (logs under $OUT)
set -u
S=$(pwd)/.device/s35; B=/tmp/s35bin; mkdir -p $B
for f in $S/new/* $S-main/main/*; do
  [ -f "$f" ] || continue
  n=$(basename $(dirname $f)).$(basename $f .xz)
  case $f in *.xz) xz -dc $f > $B/$n;; *) cp $f $B/$n;; esac; chmod +x $B/$n
done
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; (cd $B && sha256sum *); } > $OUT/host.log 2>&1
cd $B
run() { # name timeout binary args...
  local n=$1 t=$2; shift 2
  local t0=$(date +%s)
  timeout -s INT $t "$@" --test-threads 1 --nocapture > $OUT/$n.log 2>&1
  echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$n.log
}
# QUICK=1 (an iteration): numerics of the SmolLM2 shape only, main's speed not re-run.
if [ "${QUICK:-0}" = 1 ]; then
  run numerics 150 ./new.gpu_numerics smollm2_shape
else
  run numerics 150 ./new.gpu_numerics
  run fuse-before 90 ./main.gpu_fuse fused_and_unfused_step_speeds_on_the_smollm2_shape
fi
run fuse-after 150 ./new.gpu_fuse
run prefill-after 90 ./new.gpu_prefill
grep -hE "^test |differ|greedy|tg128|pp128|pp2048|panicked|rc=|result" $OUT/*.log | cut -c1-300 | head -90
# Kernel durations of the fused kernels in the eager load checks and teacher forcing of the
# 4-layer SmolLM2 shape (positions up to 48; ncu times each kernel alone).
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout -s INT 150 $NCU -k 'regex:^(qkv_rope|attention_fused|prep_matvec|prep_matvec_pairs|sample_advance)$' --launch-skip 220 --launch-count 220 --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv --page raw ./new.gpu_numerics smollm2_shape --test-threads 1 > $OUT/ncu-fused.csv 2> $OUT/prof.log
python3 $S/../../runtime/gpu/ncu_sum.py $OUT/ncu-fused.csv >> $OUT/prof.log 2>&1; tail -12 $OUT/prof.log
