#!/usr/bin/env bash
# Session 34, helper H19 (issue 26, "Correct"): the GPU decoder against the CPU engine bit for
# bit on synthetic models, the existing bit-identity tests, and the fused step's speed before
# (main at 4cc7313) and after, in one device call. Carried: .device/h19 with the xz-compressed,
# stripped test binaries built on the development VM:
#   after:  gpu_numerics gpu_fuse gpu_prefill   (this branch)
#   before: gpu_fuse.main gpu_prefill.main      (main's build)
# Run (as it ran, from the session checkout where .device/h19 held this file as run.sh, with
# runtime/gpu/ncu_sum.py beside it): bash .device/h19/run.sh   (logs into $OUT)
set -u
B=/tmp/h19bin
mkdir -p $B
for f in .device/h19/*.xz; do xz -dc "$f" > $B/$(basename "$f" .xz); chmod +x $B/$(basename "$f" .xz); done
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; (cd $B && sha256sum *); } > $OUT/host.log 2>&1
cd $B
run() { # name timeout binary args...
  local n=$1 t=$2; shift 2
  timeout -s INT $t "$@" --test-threads 1 --nocapture > $OUT/$n.log 2>&1
  echo "rc=$?" >> $OUT/$n.log
}
run numerics 150 ./gpu_numerics
run fuse-before 90 ./gpu_fuse.main fused_and_unfused_step_speeds_on_the_smollm2_shape
run fuse-after 120 ./gpu_fuse
run prefill-after 90 ./gpu_prefill
grep -hE "^test |differ|greedy|tg128|pp128|pp2048|panicked|rc=|result" $OUT/*.log | cut -c1-300 | head -90
# Kernel durations of the fused step's eager load check (4-layer SmolLM2 shape, positions 0..5).
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
cp /work/main/.device/h19/ncu_sum.py /tmp/ncu_sum.py 2>/dev/null || cp $OLDPWD/.device/h19/ncu_sum.py /tmp/ncu_sum.py
timeout -s INT 120 $NCU --launch-skip 288 --launch-count 138 --metrics gpu__time_duration.sum --csv --page raw ./gpu_numerics smollm2_shape --test-threads 1 > $OUT/ncu-fused.csv 2> $OUT/prof.log
python3 /tmp/ncu_sum.py $OUT/ncu-fused.csv >> $OUT/prof.log 2>&1; tail -12 $OUT/prof.log
