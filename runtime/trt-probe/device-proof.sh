#!/usr/bin/env bash
# The real-TensorRT proof, run on the GPU host (one call, everything logged).
#
# Prepare on the development machine (repo root):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 -d .whl \
#     tensorrt-lean-cu13-libs==11.4.0.106
#   cargo test --release -p tether-runtime --no-default-features --no-run
#   mkdir -p .device && cp target/release/deps/trt_real_library-<hash> .device/trt_real_library
#   strip .device/trt_real_library
# Run there (repo root; .whl and .device carried):
#   bash runtime/trt-probe/device-proof.sh
# Output: $OUT/proof.log (everything), $OUT/nvsmi.log (per-process device
# memory sampled every second by nvidia-smi, the fallback measurement).
set -uo pipefail
OUT="${OUT:-/tmp/tether-proof}"
mkdir -p "$OUT"
{
  echo "## host"
  date -u
  uname -a
  grep PRETTY_NAME /etc/os-release
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.used,memory.total --format=csv
  echo "## TensorRT lean runtime wheel"
  mkdir -p /tmp/trt
  python3 -m zipfile -e .whl/tensorrt_lean_cu13_libs-11.4.0.106-*.whl /tmp/trt
  ls -la /tmp/trt/tensorrt_lean_libs
  sha256sum .whl/tensorrt_lean_cu13_libs-11.4.0.106-*.whl .device/trt_real_library
  echo "## proof"
  export TETHER_TENSORRT_LIB=/tmp/trt/tensorrt_lean_libs/libnvinfer_lean.so.11
  echo "+ TETHER_TRT_REAL_LIBRARY=1 TETHER_TENSORRT_LIB=$TETHER_TENSORRT_LIB ./.device/trt_real_library --nocapture --test-threads=1"
  TETHER_TRT_REAL_LIBRARY=1 RUST_BACKTRACE=1 ./.device/trt_real_library --nocapture --test-threads=1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >>"$OUT/nvsmi.log" 2>&1
    sleep 1
  done
  wait "$pid"
  rc=$?
  echo "proof exit status: $rc"
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv
} 2>&1 | tee "$OUT/proof.log"
