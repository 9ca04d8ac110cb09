#!/usr/bin/env bash
# Fourth run, call I (evidence; binaries of commit 7900d15): native engine after the filtered candidates + generalised bias_act; detect pipeline incl. 100k frames; bench + PyTorch peer in the same call.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
mkdir -p /tmp/cudnn919 && ln -sf "$SP/nvidia/cudnn/lib/libcudnn.so.9" /tmp/cudnn919/libcudnn.so
L914=/usr/local/cuda/lib64
L919=/tmp/cudnn919:$SP/nvidia/cudnn/lib:/usr/local/cuda/lib64
export LD_LIBRARY_PATH=$L914 TETHER_NATIVE_FRAMES=3000 TETHER_ASSETS="$A"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$B/bin/native_gpu" --ignored --nocapture --exact libraries_are_found_and_reported 2>&1 | grep -i "cudnn:\|cublas:"
  for t in host_reference_and_gpu_agree_on_noise yolov8n_320_fp32 yolov8n_320_fp16 yolov8n_doclaynet_1024_fp32 yolov8n_doclaynet_1024_fp16; do
    echo "=== native $t"
    timeout 150 "$B/bin/native_gpu" --ignored --test-threads=1 --nocapture --exact "$t" 2>&1 | grep -v " INFO "
  done
} > "$OUT/native.log" 2>&1
{
  echo "=== gpu_pipeline (all detect GPU tests; real 320n hot path over 100000 frames)"
  TETHER_REAL_HOT_FRAMES=100000 TETHER_FIELD_CASES="$R/tests/field" timeout 400 "$B/bin/gpu_pipeline" --test-threads=1 --nocapture 2>&1 | grep -v " INFO "
} > "$OUT/pipeline.log" 2>&1
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
  for m in "nudenet astronaut.png 3000" "doclaynet page.png 1000"; do
    set -- $m
    for p in fp32 tf32 fp16; do
      echo "=== bench $1 $p"
      timeout 60 "$T" bench "$W/$1.bundle" "$A/$2" --device cuda --precision $p --runs "$3" --warmup 30 --json "$OUT/bench-$1-$p.json" 2>&1 | grep -E "^\s+(total|model|upload|letterbox|decode\+nms|stage-in|host-overhead) "
    done
  done
} > "$OUT/bench.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/yolov8n-doclaynet.onnx" 1024 1024 --fp16 --runs 500 > "$OUT/peer-doclaynet.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
(cd "$OUT" && tar -czf json.tar.gz *.json && rm -f *.json)
ls -la "$OUT"
