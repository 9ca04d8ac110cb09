#!/usr/bin/env bash
# Sixth run, call 3: the frame copy into staging with streaming stores (`tether`) against a
# plain memcpy (`tether-plain`, the binary of call 2), the same bench interleaved A B A B,
# on the 512x512 astronaut and a 1920x1080 frame; `--staged` (no copy) for reference.
# hd.jpg: astronaut.png resized to 1920x1080 (Pillow: Image.open(p).convert("RGB")
# .resize((1920, 1080)).save("hd.jpg", quality=90)); call 4 uses the same file.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; grep -m1 "model name" /proc/cpuinfo; } > "$OUT/bench.log"
W=/tmp/tether-cli; mkdir -p "$W"
ROWS='^\s+(total|model|upload|letterbox|decode\+nms|stage-in|host-overhead) |rror'
{
  "$B/bin/tether" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  for img in astronaut.png hd.jpg; do
    for p in fp16 fp32; do
      for t in tether-plain tether tether-plain tether "tether --staged"; do
        set -- $t; bin=$1; shift
        echo "=== bench nudenet $img $p $bin $*"
        timeout 60 "$B/bin/$bin" bench "$W/nudenet.bundle" "$A/$img" --device cuda --precision $p --runs 3000 --warmup 30 "$@" 2>&1 | grep -E "$ROWS"
      done
    done
  done
} >> "$OUT/bench.log" 2>&1
ls -la "$OUT"
