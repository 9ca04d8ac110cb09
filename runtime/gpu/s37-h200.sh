#!/usr/bin/env bash
# Session 37, issue 26 (branch s37-cluster): one device call with stripped test binaries
# (built on the development VM: `cargo test --release -p tether-llm --features cuda,build,cli
# --no-run`, stripped, xz), carried as .device/DIR/NAME.xz; main's gpu_fuse as
# .device/DIR/main-gpu_fuse.xz (the baseline, run in the same call). Each binary embeds its
# commit's kernel images.
#   gpu_numerics  decode step, fused step and prefill graph against the CPU engine, bit for bit
#   gpu_fuse      fused = unfused bit for bit, also over 2,100 positions (the cluster
#                 attention's every split); the fused step's speed on the SmolLM2 shape (30
#                 layers Q4_1) at positions 128 and 2048
# Speed runs alternate main / branch (ROUNDS, default 2), only the speed test. With PROFILE=1
# (the default) ncu's kernel times (--cache-control none --clock-control none) of the first 330
# launches of `fused_step_equals_the_unfused_step_bit_for_bit` (4 layers; the load check's 6
# eager steps and 6 replays at positions 0-5, and the unfused run's embed and sampler
# launches; session 39's profiles) for main and the branch, summed by
# kernel and grid (ncu_sum.py).
# The checkout travels with the call: on this branch (compressed fatbins) the tracked tree is
# ~34 MB, so up to ~29 MB can be carried (.device/s37b: 15.8 MB). The binaries also check
# that the driver loads the compressed llm image (any module load error says it does not).
# Run from the checkout: DIR=s37b bash runtime/gpu/s37-h200.sh (logs under $OUT).
set -u
R=$(pwd); S=$R/.device/${DIR:?}; B=/tmp/s37bin; mkdir -p $B
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $OUT/host.log 2>&1
for f in $S/*.xz; do n=$(basename $f .xz); xz -dc $f > $B/$n; chmod +x $B/$n; done
(cd $B && sha256sum *) >> $OUT/host.log
run() { # log timeout binary args...
  local n=$1 t=$2; shift 2
  local t0=$(date +%s)
  (cd $B && timeout -s INT $t "$@" --test-threads 1 --nocapture) >> $OUT/$n.log 2>&1
  echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >> $OUT/$n.log
}
[ -x $B/gpu_numerics ] && run numerics 200 ./gpu_numerics
[ -x $B/gpu_fuse ] && run fuse 200 ./gpu_fuse --skip speeds
for i in $(seq ${ROUNDS:-2}); do
  for V in main- ""; do
    [ -x $B/${V}gpu_fuse ] && run ${V}speed 120 ./${V}gpu_fuse fused_and_unfused_step_speeds
  done
done
if [ "${PROFILE:-1}" = 1 ]; then
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  for V in main- ""; do
    [ -x $B/${V}gpu_fuse ] || continue
    (cd $B && timeout -s INT 150 $NCU -k 'regex:^(qkv_rope|prep_matvec|prep_matvec_wide|attention_fused|attention_cluster|sample_advance|embed)$' --launch-count 330 --cache-control none --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --page raw ./${V}gpu_fuse fused_step_equals_the_unfused_step_bit_for_bit --test-threads 1 > $OUT/${V}ncu.csv 2> $OUT/${V}prof.log)
    python3 $R/runtime/gpu/ncu_sum.py $OUT/${V}ncu.csv >> $OUT/${V}prof.log 2>&1
    rm -f $OUT/${V}ncu.csv
  done
fi
grep -hE "^test |differ|tg128|rc=|panicked|replayed" $OUT/*.log | cut -c1-220
tail -n 12 $OUT/*prof.log
