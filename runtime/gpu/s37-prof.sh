#!/usr/bin/env bash
# Session 37: ncu --set full (its defaults: base SM clock, caches flushed before each pass)
# over six fused decode kernels of the SmolLM2 shape, as main's gpu_fuse speed test (session
# 36's binary, .device/s36f/gpu_fuse.xz) launches them: one layer's down, QKV, attention, O,
# gate/up, down. Ran in one call of 417 s (the whole speed test runs under ncu: most of that
# time is the unprofiled launches). The report and the source page were too large to return
# (21 and 54 MB); the details page is docs/evidence/h200-bench/s37-ncu-decode-details.txt.
# Run from the checkout: bash runtime/gpu/s37-prof.sh (logs under $OUT).
set -u
R=$(pwd); B=/tmp/s37b; mkdir -p $B
xz -dc .device/s36f/gpu_fuse.xz > $B/gpu_fuse; chmod +x $B/gpu_fuse
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu | head -1)
cd $B
timeout -s INT 400 $NCU --set full --import-source yes -k 'regex:^(qkv_rope|prep_matvec|attention_fused)$' --launch-skip 200 --launch-count 6 -o $OUT/rep ./gpu_fuse fused_and_unfused_step_speeds_on_the_smollm2_shape --test-threads 1 > $OUT/run.log 2>&1
echo rc=$? >> $OUT/run.log
$NCU -i $OUT/rep.ncu-rep --page details > $OUT/details.txt 2>&1
$NCU -i $OUT/rep.ncu-rep --page source --csv --print-source sass > $OUT/source.csv 2>&1
ls -la $OUT; tail -5 $OUT/run.log
