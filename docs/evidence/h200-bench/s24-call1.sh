#!/usr/bin/env bash
# Issue 24 (structure), one H200 call: the restructured tree ("after", HEAD) against the last
# main before it ("before", fbaf9ff), same host, same call, empty plan caches.
# Carried: .device/c1/bins.tar.xz (stripped release `tether` of HEAD and `tether-before` of
# fbaf9ff, one `tar | xz -9e`) and .device/c1/assets (320n.onnx, yolov8n-doclaynet.onnx,
# astronaut.png, page.png). The tests of the same tree: s24-call2.sh (native engine, detect),
# s24-call3.sh (OCR, VAD), s24-call4.sh (embed).
# 1. Same detections: `run --json` before and after on both models, each precision, diffed.
# 2. `tether bench --staged --floor`, before and after interleaved (two rounds), YOLOv8n 320
#    and DocLayNet 1024 x fp32/TF32/fp16.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device/c1"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B/bin"
tar -C "$B/bin" -xJf "$D/bins.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; uname -m; date -u; } > "$OUT/host.log" 2>&1
S=$(date +%s); el() { echo "elapsed $(( $(date +%s) - S )) s"; }
W=/tmp/tether-cli; mkdir -p "$W"
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
} > "$OUT/detections.log" 2>&1
ROWS='^\s+(stage|total|model|upload|stage-in|letterbox|decode\+nms|download|collect|floor|beyond-floor|staging) |frames/s|rror|WARN|panick'
bench() { # bin tag net img runs precision
  timeout 60 "$B/bin/$1" bench "$W/$3-$2.bundle" "$A/$4" --device cuda --precision $6 --runs "$5" --warmup 30 --staged --floor 2>&1 | grep -E "$ROWS"
}
{
  for m in "nudenet astronaut.png 2000" "doclaynet page.png 1000"; do
    for p in fp32 tf32 fp16; do
      for round in 1 2; do
        echo "=== before $m $p (round $round)"; bench tether-before before $m $p
        echo "=== after $m $p (round $round)"; bench tether after $m $p
      done
    done
  done
  el
} > "$OUT/bench.log" 2>&1
el >> "$OUT/host.log"
