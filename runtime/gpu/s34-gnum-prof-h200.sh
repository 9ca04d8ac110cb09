#!/usr/bin/env bash
# H19 profile: kernel durations of the eager load-check steps (unfused then fused) of the
# SmolLM2-shaped 4-layer Q4_1 model (gpu_numerics), ncu gpu__time_duration per kernel.
set -u
B=/tmp/h19bin; mkdir -p $B
for f in .device/h19/gpu_numerics.xz; do xz -dc "$f" > $B/gpu_numerics; chmod +x $B/gpu_numerics; done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" > $OUT/prof.log
cp .device/h19/ncu_sum.py /tmp/ncu_sum.py; cd $B
timeout -s INT 240 $NCU --launch-count 430 --metrics gpu__time_duration.sum --csv --page raw ./gpu_numerics smollm2_shape --test-threads 1 > $OUT/ncu.csv 2>> $OUT/prof.log
echo "rc=$?" >> $OUT/prof.log
python3 /tmp/ncu_sum.py $OUT/ncu.csv >> $OUT/prof.log 2>&1
cat $OUT/prof.log | head -40
