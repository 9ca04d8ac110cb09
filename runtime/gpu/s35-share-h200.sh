#!/usr/bin/env bash
# Session 35 (issue 26, "two generators on one model share the weights"): tests/gpu_share.rs
# on the H200. Carried: .device/s35-share/gpu_share.xz, the stripped test binary built on the
# development VM (`cargo test --release -p tether-llm --features cuda,build,cli --no-run`).
#   bash runtime/gpu/s35-share-h200.sh      (log under $OUT)
set -u
xz -dc .device/s35-share/gpu_share.xz > /tmp/gpu_share && chmod +x /tmp/gpu_share
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; sha256sum /tmp/gpu_share; } > $OUT/share.log 2>&1
echo '$ ./gpu_share --test-threads 1 --nocapture' >> $OUT/share.log
timeout -s INT 120 /tmp/gpu_share --test-threads 1 --nocapture >> $OUT/share.log 2>&1
echo "rc=$?" >> $OUT/share.log
cat $OUT/share.log
