#!/usr/bin/env bash
# The released CLI on the H200, end to end: `tether doctor`, bundles built from
# both real models, detection with `--device cuda` against `--device cpu`,
# the automatic device choice, and latency per device.
# Layout: .device/bin/tether (stripped release build, default features),
# .device/assets/{320n.onnx,yolov8n-doclaynet.onnx,astronaut.png,page.png}.
set -uo pipefail
OUT="${OUT:-/tmp/tether-out}"; mkdir -p "$OUT"
D="$(pwd)/.device"; T="$D/bin/tether"; A="$D/assets"; W=/tmp/tether-cli; mkdir -p "$W"
exec > >(tee "$OUT/h200-cli.log") 2>&1
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
export XDG_CACHE_HOME=/tmp/tether-cache
chmod +x "$T"
T0=$(date +%s); step() { echo; echo "== [$(( $(date +%s) - T0 ))s] \$ $*"; "$@"; echo "(exit $?)"; }
echo "== host"; date -u; uname -m; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
step "$T" doctor
step "$T" doctor --json
step "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320
step "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle"
step "$T" verify "$W/doclaynet.bundle"
# The automatic choice, with the load log (first use compiles tract-cuda's kernels with NVRTC).
step "$T" -v run "$W/nudenet.bundle" "$A/astronaut.png"
for m in "nudenet astronaut" "doclaynet page"; do
  set -- $m
  for dev in cuda cpu; do
    step "$T" run "$W/$1.bundle" "$A/$2.png" --device $dev --json
  done
done
step "$T" -v run "$W/doclaynet.bundle" "$A/page.png" --device cuda --annotate "$OUT/page.gpu.png"
step "$T" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --runs 2000 --warmup 50
step "$T" bench "$W/doclaynet.bundle" "$A/page.png" --device cuda --runs 500 --warmup 20
step "$T" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cpu --runs 100 --warmup 5
step "$T" bench "$W/doclaynet.bundle" "$A/page.png" --device cpu --runs 20 --warmup 2
echo; echo "== done in $(( $(date +%s) - T0 ))s"
