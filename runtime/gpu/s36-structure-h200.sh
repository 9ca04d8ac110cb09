#!/usr/bin/env bash
# Session 36, issue 24's closing comparison on the H200, in one call: the tree before issue 24
# (fbaf9ff) against main after it (the native engine's stages and operators, the families'
# shared parts, the request state; the commit in .device/s36-bin/COMMIT), each `tether` building
# its own bundles from the same ONNX files, empty plan caches:
#   1. same detections: `run --json`, YOLOv8n 320 (astronaut.png) and DocLayNet 1024 (page.png),
#      fp32 / TF32 / fp16;
#   2. `tether bench --staged --floor`, before and after interleaved, ROUNDS rounds (default 2);
#   3. the native engine's checks (`native_gpu`: libraries, host reference on noise, the in-place
#      row update, both models in every precision against the host reference with graph
#      replays) and the detection family's GPU tests (`gpu_pipeline`), main's builds.
# Calls before it, back to back while the host stays warm: .device/s36-c1 (tether-before.xz,
# copied to /tmp/s36), .device/s36-oN (N = 1..6: pieces of a tar of the two ONNX files, xz, and
# the two images, copied to /tmp/s36), and the peers call that left main's `tether` in
# /tmp/h15real. This call carries .device/s36-c11 (native_gpu.xz, gpu_pipeline.xz, stripped
# release test binaries of main). Run: bash runtime/gpu/s36-structure-h200.sh (logs under $OUT).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; B=/tmp/s36; A=$B/assets; mkdir -p "$A" "$B/bin"
cat $B/piece0? > $B/onnx.tar && tar -C "$A" -xf $B/onnx.tar && (cd "$A" && xz -d -f *.onnx.xz)
xz -dc $B/tether-before.xz > $B/bin/tether-before; chmod +x $B/bin/tether-before
for f in "$R"/.device/s36-c11/*.xz; do n=$(basename $f .xz); xz -dc $f > $B/bin/$n; chmod +x $B/bin/$n; done
TB=$B/bin/tether-before; TA=/tmp/h15real/tether
C=/tmp/s36-plan-cache; rm -rf "$C"
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
export TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C" TETHER_NATIVE_FRAMES=1000
{ hostname; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; uname -m; date -u; sha256sum $B/onnx.tar $TB $TA $B/bin/*; } > "$OUT/s24-host.log" 2>&1
S=$(date +%s); el() { echo "elapsed $(( $(date +%s) - S )) s"; }
W=/tmp/s36-cli; rm -rf "$W"; mkdir -p "$W"
for v in before after; do
  T="$TA"; [[ $v == before ]] && T="$TB"
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet-$v.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet-$v.bundle" >/dev/null
done
{
  for m in "nudenet astronaut.png" "doclaynet page.png"; do
    set -- $m
    for p in fp32 tf32 fp16; do
      "$TB" run "$W/$1-before.bundle" "$A/$2" --device cuda --precision $p --json > "$W/$1-$p-before.json" 2>/dev/null
      "$TA" run "$W/$1-after.bundle" "$A/$2" --device cuda --precision $p --json > "$W/$1-$p-after.json" 2>/dev/null
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
} > "$OUT/s24-detections.log" 2>&1
ROWS='^\s+(total|model|floor|beyond-floor) |frames/s|rror|WARN|panick'
bench() { # bin tag net img runs precision
  timeout 60 "$1" bench "$W/$3-$2.bundle" "$A/$4" --device cuda --precision $6 --runs "$5" --warmup 30 --staged --floor 2>&1 | grep -E "$ROWS"
}
{
  for round in $(seq ${ROUNDS:-2}); do
  echo "##### round $round"
  for m in "nudenet astronaut.png 1000" "doclaynet page.png 500"; do
    for p in fp32 tf32 fp16; do
      echo "=== before $m $p"; bench "$TB" before $m $p
      echo "=== after $m $p"; bench "$TA" after $m $p
    done
  done
  done
  el
} > "$OUT/s24-bench.log" 2>&1
{
  echo "=== native_gpu (TETHER_NATIVE_FRAMES=$TETHER_NATIVE_FRAMES)"
  timeout 200 "$B/bin/native_gpu" --include-ignored --test-threads=1 libraries yolov8n host_reference update_rows 2>&1 | grep -v " INFO "
  el
} > "$OUT/s24-native.log" 2>&1
{
  echo "=== gpu_pipeline"
  timeout 200 "$B/bin/gpu_pipeline" --test-threads=1 --nocapture 2>&1 | grep -v " INFO "
  el
} > "$OUT/s24-gpu_pipeline.log" 2>&1
grep -hE "same|DIFFERENT|^test |result|elapsed" "$OUT"/s24-*.log | cut -c1-200
python3 "$R/runtime/gpu/bench_pairs.py" "$OUT/s24-bench.log" 2>&1 | tee "$OUT/s24-bench-table.log"
