#!/usr/bin/env bash
# Session 37, issue 26: one device call with stripped test binaries (built on the development
# VM: `cargo test --release -p tether-llm --features cuda,build,cli --no-run`, stripped, xz),
# carried as .device/DIR/NAME.xz; main's binaries as .device/DIR/main-NAME.xz (the baseline,
# run in the same call). Each binary embeds its commit's kernel images.
#   gpu_numerics  decode step, fused step and prefill graph against the CPU engine, bit for bit
#   gpu_fuse      fused = unfused bit for bit (long spans too); the fused step's speed on the
#                 SmolLM2 shape (30 layers Q4_1) at positions 128 and 2048
# Speed runs alternate main / this commit (ROUNDS, default 2), only the speed test
# (`fused_and_unfused_step_speeds_on_the_smollm2_shape`).
# Run from the checkout: DIR=s37a bash runtime/gpu/s37-h200.sh (logs under $OUT).
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
grep -hE "^test |differ|tg128|rc=|panicked|replayed" $OUT/*.log | cut -c1-220
