#!/usr/bin/env python3
"""The PyTorch peer of a tether GPU benchmark, run in the same device call (gpu-host.md recipe).

The strongest PyTorch form of the same ONNX network: fold it with onnxruntime (BASIC level,
`optimized_model_filepath`), convert with onnx2torch, `torch.jit.trace` + `torch.jit.freeze`,
warm up on a side stream, capture one call in a `torch.cuda.CUDAGraph`, and time `replay()` +
`synchronize()` on the host clock (the same quantity as `tether bench`'s total on a GPU:
launch + wait). Also reports traced eager, and the CUDA-event GPU time of one replay.

Usage: peer_torch.py MODEL.onnx HEIGHT WIDTH [--runs N] [--warmup N] [--fp16] [--kernels FILE]
Prints one JSON object per configuration on stdout (and a table line on stderr). `--kernels`
appends, per configuration, every GPU kernel of one traced call in launch order with its
duration (torch.profiler, CUPTI): the per-layer peer of tether's step profile.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch
from onnx2torch import convert


def fold(model_path: str) -> str:
    """onnxruntime BASIC graph optimisation written back as ONNX (constant folding)."""
    out = os.path.join(tempfile.mkdtemp(prefix="peer-"), "folded.onnx")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = out
    ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    return out


def wall(fn, runs: int) -> np.ndarray:
    t = np.empty(runs)
    for i in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t[i] = (time.perf_counter() - t0) * 1e3
    return t


def kernel_list(fn, x, title: str, path: str) -> None:
    """One call of `fn(x)` under torch.profiler: each GPU kernel in launch order, its time."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(x)
        torch.cuda.synchronize()
    kernels = sorted(
        (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
        key=lambda e: e.time_range.start,
    )
    total = sum(e.time_range.elapsed_us() for e in kernels)
    with open(path, "a") as f:
        f.write(f"== {title}: {len(kernels)} kernels, {total:.1f} us of kernel time\n")
        for e in kernels:
            f.write(f"{e.time_range.elapsed_us():9.1f} us  {e.name[:160]}\n")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("height", type=int)
    p.add_argument("width", type=int)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--fp16", action="store_true", help="also TF32 (PyTorch's default for cuDNN convolutions) and fp16 channels-last")
    p.add_argument("--kernels", help="append each configuration's kernel list (launch order, GPU us) to this file")
    a = p.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    module = convert(fold(a.model)).eval().cuda()
    configs = [("fp32", torch.float32, torch.contiguous_format, False)]
    if a.fp16:
        configs.append(("tf32", torch.float32, torch.contiguous_format, True))
        configs.append(("fp16-channels-last", torch.float16, torch.channels_last, False))
    for name, dtype, fmt, tf32 in configs:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        m = module.to(dtype=dtype, memory_format=fmt)
        x = torch.rand(1, 3, a.height, a.width, device="cuda", dtype=dtype).contiguous(
            memory_format=fmt
        )
        with torch.inference_mode():
            traced = torch.jit.freeze(torch.jit.trace(m, x, check_trace=False))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(a.warmup):
                    traced(x)
            torch.cuda.current_stream().wait_stream(side)
            eager = wall(lambda: traced(x), a.runs)
            if a.kernels:
                kernel_list(traced, x, f"{os.path.basename(a.model)} {a.height}x{a.width} {name}", a.kernels)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = traced(x)
            for _ in range(a.warmup):
                graph.replay()
            torch.cuda.synchronize()
            replay = wall(graph.replay, a.runs)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            gpu = []
            for _ in range(200):
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                gpu.append(start.elapsed_time(end))
            del y
        row = {
            "peer": "pytorch",
            "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(),
            "device": torch.cuda.get_device_name(),
            "model": os.path.basename(a.model),
            "shape": [1, 3, a.height, a.width],
            "precision": name,
            "runs": a.runs,
            "traced_eager_ms": {"p50": float(np.percentile(eager, 50)), "p99": float(np.percentile(eager, 99))},
            "graph_replay_ms": {"p50": float(np.percentile(replay, 50)), "p99": float(np.percentile(replay, 99)), "p99.9": float(np.percentile(replay, 99.9))},
            "graph_gpu_ms_p50": float(np.percentile(gpu, 50)),
        }
        print(json.dumps(row), flush=True)
        print(
            f"pytorch {name:>18} {os.path.basename(a.model)} {a.height}x{a.width}: traced eager p50 "
            f"{row['traced_eager_ms']['p50']:.3f} ms; graph replay+sync p50 "
            f"{row['graph_replay_ms']['p50']:.3f} ms p99 {row['graph_replay_ms']['p99']:.3f} ms "
            f"p99.9 {row['graph_replay_ms']['p99.9']:.3f} ms "
            f"(GPU {row['graph_gpu_ms_p50']:.3f} ms)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
