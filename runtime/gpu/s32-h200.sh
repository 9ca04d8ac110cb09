#!/usr/bin/env bash
# Session 32's GPU checks, one call (see docs/evidence/*): run from the repository root.
set -uo pipefail
D=.device/s32-final
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib | tr '\n' ':')/usr/local/cuda/lib64
mkdir -p /tmp/s32 && cd /tmp/s32
for f in $OLDPWD/$D/*.xz; do xz -dc "$f" > "$(basename "$f" .xz)"; chmod +x "$(basename "$f" .xz)"; done
cp $OLDPWD/$D/*.bundle $OLDPWD/$D/*.wav . 2>/dev/null
{ date -u; hostname; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; } > $OUT/host.txt 2>&1
step() { local name=$1; shift; echo "\$ $*" > $OUT/$name.log; local t0=$(date +%s.%N); timeout ${TMO:-120} "$@" >> $OUT/$name.log 2>&1; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s" >> $OUT/$name.log; }
step native_update ./native_gpu --ignored --exact update_rows_captured_once_writes_at_every_position --nocapture --test-threads 1
step vad_run ./tether run vad.bundle Front_Center.wav --device cuda --json
step vad_verify ./tether verify vad.bundle --self-test --device cuda
step vad_bench ./tether bench vad.bundle Front_Center.wav --device cuda --runs 20 --json
TMO=80 step llm_sample ./gpu_sample --test-threads 1 --nocapture
ls -la > $OUT/files.txt
