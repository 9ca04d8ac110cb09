#!/usr/bin/env bash
# Session 33's first GPU call (issue 24's prepare split, issue 27's allocation count through C),
# run from the repository root on the H200 host after a call that carried .device/s33-assets
# (320n.onnx, yolov8n-doclaynet.onnx, astronaut.png, page.png) while the machine stayed warm.
# Carried in this call: .device/s33-final/bins.tar.xz (stripped release builds: `tether` of this
# commit, `tether-before` of 84d3d34 (main before the split), the `native_gpu` test binary,
# libtether.so (tether-capi) and capi/tests/c/gpu_network.c + alloc_count.c compiled against it
# with RPATH $ORIGIN).
# 1. Same detections: `run --json` before and after, YOLOv8n 320 and DocLayNet 1024 x
#    fp32/TF32/fp16 (docs/evidence/h200-bench/s24-call1.sh's comparison).
# 2. `tether bench --staged --floor`, before and after interleaved.
# 3. The native engine's checks (`native_gpu`: libraries, host reference, both models in
#    every precision against the host reference, graph replay) with the new build.
# 4. gpu_network: device I/O on the caller's stream and heap allocations through C (network
#    runs and tether_detect on the GPU), copy and mapped staging.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; A="$R/.device/s33-assets/assets"; B=/tmp/s33; rm -rf "$B"; mkdir -p "$B/bin"
tar -C "$B/bin" -xJf "$R/.device/s33-final/bins.tar.xz"
C=/tmp/s33-plan-cache; rm -rf "$C"
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
export TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C" TETHER_NATIVE_FRAMES=1000
{ hostname; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; uname -m; date -u; (cd "$B/bin" && sha256sum *); } > "$OUT/host.log" 2>&1
S=$(date +%s); el() { echo "elapsed $(( $(date +%s) - S )) s"; }
W=/tmp/s33-cli; rm -rf "$W"; mkdir -p "$W"
for v in before after; do
  T="$B/bin/tether"; [[ $v == before ]] && T="$B/bin/tether-before"
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet-$v.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet-$v.bundle" >/dev/null
done
{
  for m in "nudenet astronaut.png" "doclaynet page.png"; do
    set -- $m
    for p in fp32 tf32 fp16; do
      "$B/bin/tether-before" run "$W/$1-before.bundle" "$A/$2" --device cuda --precision $p --json > "$W/$1-$p-before.json" 2>/dev/null
      "$B/bin/tether" run "$W/$1-after.bundle" "$A/$2" --device cuda --precision $p --json > "$W/$1-$p-after.json" 2>/dev/null
      python3 - "$W/$1-$p-before.json" "$W/$1-$p-after.json" "$1 $p" <<'PY'
import json, sys
def find(j):
    if isinstance(j, dict):
        if isinstance(j.get("detections"), list): return j["detections"]
        j = list(j.values())
    if isinstance(j, list):
        for x in j:
            r = find(x)
            if r is not None: return r
    return None
def dets(p):
    d = find(json.load(open(p))) or []
    return [(x["class_id"], round(float(x["score"]), 4), [round(float(v), 2) for v in x["box"]]) for x in d]
a, b = dets(sys.argv[1]), dets(sys.argv[2])
print(f"{sys.argv[3]}: before {len(a)} detections, after {len(b)}: {'same' if a == b else 'DIFFERENT'}")
if a != b:
    for x, y in zip(a, b):
        if x != y: print("  before", x, "after", y)
PY
    done
  done
  el
} > "$OUT/detections.log" 2>&1
ROWS='^\s+(total|model|floor|beyond-floor) |frames/s|rror|WARN|panick'
bench() { # bin tag net img runs precision
  timeout 60 "$B/bin/$1" bench "$W/$3-$2.bundle" "$A/$4" --device cuda --precision $6 --runs "$5" --warmup 30 --staged --floor 2>&1 | grep -E "$ROWS"
}
{
  for m in "nudenet astronaut.png 1000" "doclaynet page.png 500"; do
    for p in fp32 tf32 fp16; do
      echo "=== before $m $p"; bench tether-before before $m $p
      echo "=== after $m $p"; bench tether after $m $p
    done
  done
  el
} > "$OUT/bench.log" 2>&1
{
  echo "=== native_gpu (TETHER_NATIVE_FRAMES=$TETHER_NATIVE_FRAMES)"
  timeout 200 "$B/bin/native_gpu" --include-ignored --test-threads=1 libraries yolov8n host_reference update_rows 2>&1 | grep -v " INFO "
  el
} > "$OUT/native.log" 2>&1
{
  cd "$B/bin"
  for s in copy mapped; do
    echo "=== gpu_network 320n $s"; timeout 60 ./gpu_network "$W/nudenet-after.bundle" $s; echo "rc=$?"
  done
  el
} > "$OUT/capi.log" 2>&1
tail -n 3 "$OUT"/*.log
