#!/usr/bin/env bash
# Build (release, stripped, xz-packed) everything runtime/gpu/h200-run.sh needs into .device/
# (git-ignored). Runs on the development machine: no GPU, no CUDA needed. The device tool
# carries at most 64 MiB, so the binaries travel as one .tar.xz.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"; cd "$ROOT"
D=.device; rm -rf "$D"; mkdir -p "$D/pack/bin" "$D/assets"
bin_of() { # test name -> path of the test executable (workspace build, default features)
  cargo test --workspace --release --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
name=sys.argv[1]
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"] and m["target"]["name"]==name: print(m["executable"])' "$1" | tail -n1
}
cargo build --release -p tether
for t in cuda_device trt_standin gpu_pipeline ${EXTRA_TESTS:-}; do
  p="$(bin_of "$t")"; [[ -n "$p" ]] || { echo "no test binary $t" >&2; exit 1; }
  cp "$p" "$D/pack/bin/$t"
done
cp target/release/tether "$D/pack/bin/tether"
strip "$D"/pack/bin/*
runtime/trt-probe/fetch-headers.sh >/dev/null
runtime/trt-standin/build.sh "$D/pack/trt-standin" .assets/trt-headers/11.4.0
tar -C "$D/pack" -cJf "$D/pack.tar.xz" . && rm -rf "$D/pack"
cp .assets/320n.onnx .assets/astronaut.png .assets/yolov8n-doclaynet.onnx .assets/page.png "$D/assets/"
du -sh "$D" "$D"/* "$D"/assets/*
