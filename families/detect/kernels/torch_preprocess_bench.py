#!/usr/bin/env python3
"""PyTorch doing the detection family's preprocessing on the same GPU, for comparison.

The same letterbox as kernels/detect.cu (and letterbox.rs): u8 HWC RGB frame on the device ->
bilinear resize with half-pixel centres (F.interpolate(mode="bilinear", align_corners=False,
antialias=False) == OpenCV INTER_LINEAR for downscaling without antialias) to (new_h, new_w),
pad with 114 to the network size, /255, NCHW f32. Timed eagerly and as a torch.cuda.CUDAGraph,
host wall time per call including torch.cuda.synchronize(), over N runs; also the upload of the
frame from pinned host memory. Prints a markdown table; writes it to $TETHER_EVIDENCE_DIR.

It also checks its output against the tether kernel's contract on one frame (max abs
difference), since PyTorch computes the interpolation weights its own way (area_pixel_compute
_source_index in f32, then lerp), so small differences are expected.
"""
import math, os, sys, time

import torch
import torch.nn.functional as F

N = int(os.environ.get("TETHER_HOT_FRAMES", "10000"))
W, H, IW, IH = 1920, 1080, 320, 320
dev = torch.device("cuda")

r = min(IH / H, IW / W)
new_w = min(max(int(math.floor(W * r + 0.5)), 1), IW)
new_h = min(max(int(math.floor(H * r + 0.5)), 1), IH)
left, top = (IW - new_w) // 2, (IH - new_h) // 2

g = torch.Generator().manual_seed(0)
frame_host = torch.randint(0, 256, (H, W, 3), dtype=torch.uint8, generator=g).pin_memory()
frame = frame_host.to(dev)
out = torch.empty((1, 3, IH, IW), dtype=torch.float32, device=dev)


def preprocess(src, dst):
    x = src.permute(2, 0, 1).unsqueeze(0).float()  # 1x3xHxW
    y = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False, antialias=False)
    dst.fill_(114.0 / 255.0)
    dst[:, :, top:top + new_h, left:left + new_w] = y / 255.0
    return dst


def stats(ts):
    ts = sorted(ts)
    q = lambda p: ts[min(len(ts) - 1, int(round((len(ts) - 1) * p)))]
    return q(0.5), q(0.99), q(0.999)


def bench(fn, n):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e6)
    return stats(ts)


rows = []
rows.append(("letterbox, device-resident frame, eager (1 interpolate + fill + copy + div kernels)", bench(lambda: preprocess(frame, out), N)))

s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        preprocess(frame, out)
torch.cuda.current_stream().wait_stream(s)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    preprocess(frame, out)
rows.append(("letterbox, device-resident frame, torch.cuda.CUDAGraph replay", bench(graph.replay, N)))

def upload_and_replay():
    frame.copy_(frame_host, non_blocking=True)
    graph.replay()
rows.append(("frame upload (pinned, 6.2 MB) + CUDAGraph replay", bench(upload_and_replay, N)))

# GPU time of the eager letterbox with events, for the throughput line.
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
e0.record()
for _ in range(1000):
    graph.replay()
e1.record(); torch.cuda.synchronize()
gpu_us = e0.elapsed_time(e1) / 1000 * 1e3

# Compare with the tether contract on this frame (reference in float64 -> f32 arithmetic is
# what the kernel does; here a simple f32 numpy-free evaluation on the GPU).
def contract(src):
    x = src.float()
    sx, sy = torch.tensor(W / new_w, dtype=torch.float32), torch.tensor(H / new_h, dtype=torch.float32)
    xs = torch.arange(new_w, device=dev, dtype=torch.float32)
    ys = torch.arange(new_h, device=dev, dtype=torch.float32)
    fx_src = torch.clamp((xs + 0.5) * sx.to(dev) - 0.5, min=0)
    fy_src = torch.clamp((ys + 0.5) * sy.to(dev) - 0.5, min=0)
    x0 = torch.clamp(torch.floor(fx_src).long(), max=W - 1); x1 = torch.clamp(x0 + 1, max=W - 1)
    y0 = torch.clamp(torch.floor(fy_src).long(), max=H - 1); y1 = torch.clamp(y0 + 1, max=H - 1)
    fx = (fx_src - x0.float())[None, :, None]; fy = (fy_src - y0.float())[:, None, None]
    p00 = x[y0][:, x0]; p01 = x[y0][:, x1]; p10 = x[y1][:, x0]; p11 = x[y1][:, x1]
    v = (1 - fy) * ((1 - fx) * p00 + fx * p01) + fy * ((1 - fx) * p10 + fx * p11)
    full = torch.full((IH, IW, 3), 114.0, device=dev)
    full[top:top + new_h, left:left + new_w] = v
    return (full / 255.0).permute(2, 0, 1).unsqueeze(0)

diff = (contract(frame) - preprocess(frame, out)).abs().max().item()

md = [f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}: the same letterbox (1920x1080 RGB8 -> {IW}x{IH}, new {new_w}x{new_h}, top {top}), host wall time per call incl. synchronize, {N} calls each\n",
      "| what | runs | p50 us | p99 us | p99.9 us |", "|---|---|---|---|---|"]
for name, (a, b, c) in rows:
    md.append(f"| {name} | {N} | {a:.1f} | {b:.1f} | {c:.1f} |")
md.append(f"\nGPU time of the captured letterbox: {gpu_us:.1f} us per replay (events, 1000 back-to-back). Max |PyTorch - tether contract| on this frame: {diff:.2e} (PyTorch's interpolate computes source indices its own way).")
text = "\n".join(md) + "\n"
print(text)
d = os.environ.get("TETHER_EVIDENCE_DIR")
if d:
    open(os.path.join(d, "gpu-bench-torch.md"), "w").write(text)
