#!/usr/bin/env bash
# Issue 26: the prefill graph (families/llm/tests/gpu_prefill.rs) on the H200. Run from the
# main checkout root as .device/s33-prefill/gpu.sh with gpu_prefill.xz and gpu_sample.xz (stripped
# release test binaries: `cargo test --release -p tether-llm --features cuda,build --test
# gpu_prefill --test gpu_sample --no-run`, xz-compressed) and runtime/gpu/ncu_sum.py as
# ncu_sum.py beside it. Record: docs/evidence/llm-gpu.md, "Prefill graphs".
set -uo pipefail
D=$PWD/.device/s33-prefill
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib | tr '\n' ':')/usr/local/cuda/lib64
mkdir -p /tmp/h15 && cd /tmp/h15
for f in gpu_prefill gpu_sample; do xz -dc "$D/$f.xz" > $f && chmod +x $f; done
{ date -u; hostname; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; } > $OUT/host.txt 2>&1
step() { local name=$1 tmo=$2; shift 2; echo "\$ $*" > $OUT/$name.log; local t0=$(date +%s.%N); timeout -s INT $tmo "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s" >> $OUT/$name.log; }
step prefill 40 ./gpu_prefill --test-threads 1 --nocapture
TETHER_LLM_PREFILL_STAGED=1 step prefill_staged 40 ./gpu_prefill --test-threads 1 --nocapture
step sample 30 ./gpu_sample --test-threads 1 --nocapture full_generations
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
TETHER_LLM_PREFILL_STAGED=1 TETHER_LLM_PREFILL_LOAD_ONLY=1 step ncu 55 $NCU --clock-control none --metrics gpu__time_duration.sum -k 'regex:_chunk$|_chunk_staged$|^chunk_advance$' -c 364 --csv --page raw --log-file $OUT/ncu.csv ./gpu_prefill --test-threads 1 --exact prefill_graph_on_a_model_of_smollm2_shape
python3 $D/ncu_sum.py $OUT/ncu.csv > $OUT/ncu_sum.txt 2>&1
cat $OUT/ncu_sum.txt
grep -h "rc=\|pp[0-9]*:\|chunks of\|differ\|panicked\|test result" $OUT/*.log | head -60
