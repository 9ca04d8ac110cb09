#!/usr/bin/env bash
# `tether bench` evidence on the H200 host (issue 10), in one device call, plus the tract CPU
# investigation on its Xeon. Needs: the release `tether` CLI and `tract-cpu-probe` (built on the
# development machine: `cargo build --release -p tether-rt` and
# `cargo build --release -p tether-examples --bin tract-cpu-probe`), the assets
# (320n.onnx, astronaut.png), python3 with numpy + onnxruntime (installed there).
#
#   T=path/to/tether PROBE=path/to/tract-cpu-probe A=path/to/assets OUT=... bench-h200.sh
#   (GB=path/to/graph-bench, built with `-p tether-examples --features gpu`, adds its run.)
#
# Writes at most 8 files to $OUT (the device tool brings back 8):
#   bench-h200.log            everything printed (environment headers, tables, probe, ORT)
#   gpu-compare.json/.svg/.png  detection, graph vs eager interleaved, back to back
#   gpu-rate100.json/.svg     the same at a fixed 100 Hz for $GPU_RATE_S s (default 60)
#   cpu-xeon.json             the CPU engine on the Xeon, back to back, default threads
# Time: about 60 s of fixed-rate run + 25 s of back-to-back runs + 40 s of CPU probes, plus
# tract-cuda's NVRTC kernel compile on a cold cache (~96 s; XDG_CACHE_HOME is shared with
# h200-run.sh, so run after it for a warm cache). GPU_RATE_S=30 keeps the total under 3 min
# on a cold cache.
set -uo pipefail
T="${T:?path of the tether binary}"; A="${A:?assets folder}"; PROBE="${PROBE:-}"
OUT="${OUT:-/tmp/tether-out}"; mkdir -p "$OUT"
GPU_RATE_S="${GPU_RATE_S:-60}"
W=/tmp/tether-bench; mkdir -p "$W"
exec > >(tee "$OUT/bench-h200.log") 2>&1
# The system CUDA libraries only (see h200-run.sh: pip's cuDNN on LD_LIBRARY_PATH mixes with
# the apt cuDNN that `libcudnn.so` names).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/tether-cache}"
T0=$(date +%s); step() { echo; echo "== [$(( $(date +%s) - T0 ))s] $*"; }
echo "== host"; date -u; uname -m; nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz" || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true

B="$W/nudenet.bundle"; I="$A/astronaut.png"
"$T" build --family detect --onnx "$A/320n.onnx" -o "$B" --input-size 320 >/dev/null || exit 1

step "GPU, back to back: graph vs eager interleaved (2 x 1000 runs)"
"$T" bench "$B" "$I" --device cuda --compare --runs 1000 --warmup 50 \
  --json "$OUT/gpu-compare.json" --plot "$OUT/gpu-compare.svg"
"$T" bench "$B" "$I" --device cuda --compare --runs 300 --warmup 20 --plot "$OUT/gpu-compare.png" >/dev/null

step "GPU, open loop at 100 Hz for ${GPU_RATE_S} s: graph vs eager interleaved"
"$T" bench "$B" "$I" --device cuda --compare --rate 100 --duration "$GPU_RATE_S" --warmup 20 \
  --json "$OUT/gpu-rate100.json" --plot "$OUT/gpu-rate100.svg"

step "GPU, sync policies (spin / yield / block), graphs, 500 runs each"
for s in spin yield block; do
  "$T" bench "$B" "$I" --device cuda --graph --sync $s --runs 500 --warmup 20 | grep -E "^\s+(total|host-overhead) "
done

if [[ -n "${GB:-}" ]]; then
  step "graph-bench (examples/graph_bench.rs, built with --features gpu): the model API, graph vs eager, bare launch floor"
  "$GB" "$B" --runs 1000 --warmup 50 --device cuda
fi

step "CPU engine on the Xeon: default threads, then 1 thread"
"$T" bench "$B" "$I" --device cpu --runs 200 --warmup 10 --json "$OUT/cpu-xeon.json"
"$T" bench "$B" "$I" --device cpu --threads 1 --runs 40 --warmup 5 | grep -E "^\s+(total|model|cpu threads) "
"$T" bench "$B" "$I" --device cpu --rate 100 --duration 10 --warmup 5 | grep -E "^\s+(total|deadline|cpu threads) "

if [[ -n "$PROBE" ]]; then
  step "tract on this CPU: ISA, kernels, profile, denormals (1 thread, FTZ/DAZ rerun)"
  "$PROBE" "$A/320n.onnx" --shape 1x3x320x320 --image "$I" --runs 20 --warmup 3 --ftz
  step "tract: AVX-512 kernels taken out (TRACT_CPU_ISA=-avx512f)"
  TRACT_CPU_ISA=-avx512f "$PROBE" "$A/320n.onnx" --shape 1x3x320x320 --image "$I" --runs 20 --warmup 3 \
    | grep -E "ISA|tiers|kernels|^\s+[0-9]+ |^run|subnormal"
  step "tract: the AMD cost model on this Intel CPU (TRACT_X86_KIND=amd)"
  TRACT_X86_KIND=amd "$PROBE" "$A/320n.onnx" --shape 1x3x320x320 --image "$I" --runs 20 --warmup 3 \
    | grep -E "tiers|^\s+[0-9]+ |^run"
  step "tract: $(nproc) threads"
  "$PROBE" "$A/320n.onnx" --shape 1x3x320x320 --image "$I" --runs 30 --warmup 5 --threads "$(nproc)" \
    | grep -E "^run"
fi

step "onnxruntime on the same input (letterboxed astronaut.png, 1 and $(nproc) threads)"
python3 - "$A/320n.onnx" "$I" <<'EOF'
import sys, time, numpy as np, onnxruntime as ort
model, image = sys.argv[1], sys.argv[2]
try:
    from PIL import Image
    img = Image.open(image).convert("RGB")
    # The tether letterbox: scale to fit 320, centre, pad 114, [0, 1], NCHW.
    w, h = img.size; r = min(320 / w, 320 / h); nw, nh = round(w * r), round(h * r)
    canvas = np.full((320, 320, 3), 114, np.uint8)
    top, left = (320 - nh) // 2, (320 - nw) // 2
    canvas[top:top + nh, left:left + nw] = np.asarray(img.resize((nw, nh), Image.BILINEAR))
    x = (canvas.astype(np.float32) / 255.0).transpose(2, 0, 1)[None]
    print("input: letterboxed", image)
except ImportError:
    x = np.random.default_rng(0).random((1, 3, 320, 320), dtype=np.float32)
    print("input: uniform random in [0, 1) (no PIL here)")
import os
for threads in (1, os.cpu_count()):
    o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
    feed = {s.get_inputs()[0].name: x}
    for _ in range(10): s.run(None, feed)
    t = []
    for _ in range(50):
        t0 = time.perf_counter(); s.run(None, feed); t.append((time.perf_counter() - t0) * 1e3)
    t = np.array(t)
    print(f"onnxruntime {ort.__version__} threads {threads}: p50 {np.percentile(t, 50):.2f} ms  "
          f"min {t.min():.2f} ms  mean {t.mean():.2f} ms  (50 runs)")
EOF
step "done"; ls -la "$OUT"
