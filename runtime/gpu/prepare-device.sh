#!/usr/bin/env bash
# Build (release, stripped) everything runtime/gpu/h200-run.sh needs into .device/ (git-ignored).
# Runs on the development machine: no GPU, no CUDA needed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"; cd "$ROOT"
D=.device; rm -rf "$D"; mkdir -p "$D/bin" "$D/assets" "$D/kernels/bin"
bin_of() { # cargo args... -> path of the test executable
  cargo test --release "$@" --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]: print(m["executable"])' | tail -n1
}
cp "$(bin_of -p tether-runtime --no-default-features --features cuda --test cuda_device)" "$D/bin/cuda_device"
cp "$(bin_of -p tether-runtime --no-default-features --features cuda --test cuda_logic)" "$D/bin/cuda_logic"
cp "$(bin_of -p tether-detect --features tract-cuda --test gpu_pipeline)" "$D/bin/gpu_pipeline"
strip "$D"/bin/*
cp .assets/320n.onnx .assets/astronaut.png .assets/yolov8n-doclaynet.onnx .assets/page.png "$D/assets/"
cp families/detect/kernels/bin/* "$D/kernels/bin/"
cp families/detect/kernels/list-archs.sh "$D/kernels/"
cp families/detect/kernels/torch_preprocess_bench.py "$D/"
du -sh "$D" "$D"/bin/*   # the device tool carries at most 64 MiB in all (about 60 MB here)
