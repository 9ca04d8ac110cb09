#!/usr/bin/env python3
"""onnxruntime on the CPU as the peer of a tether GPU benchmark where no GPU peer runs
(the H200 host has onnxruntime with the CPU provider only), in the same device call.

Usage: peer_ort.py MODEL.onnx [--shape NAME=1x3x48x320 ...] [--value NAME=16000 ...]
                  [--threads N] [--runs N] [--warmup N] [--label TEXT]

Inputs not given a shape take the model's static shape (dynamic dims as 1). Float inputs
are uniform noise in [0, 1); integer inputs are ones (token ids, masks) unless --value fixes
them. Prints one JSON line (stdout) and one summary line (stderr): sess.run wall time,
p50/p99/p99.9 in ms, single-threaded by default (intra_op_num_threads=1), as the families'
CPU evidence compares.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort

DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--shape", action="append", default=[])
    p.add_argument("--value", action="append", default=[])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--label", default="")
    a = p.parse_args()
    shapes = {k: [int(d) for d in v.split("x")] for k, v in (s.split("=", 1) for s in a.shape)}
    values = {k: float(v) for k, v in (s.split("=", 1) for s in a.value)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {}
    for i in sess.get_inputs():
        dt = DTYPES[i.type]
        shape = shapes.get(i.name, [d if isinstance(d, int) else 1 for d in i.shape])
        if i.name in values:
            feed[i.name] = np.full(shape, values[i.name], dtype=dt)
        elif dt in (np.float32, np.float16):
            feed[i.name] = rng.random(shape, dtype=np.float32).astype(dt)
        else:
            feed[i.name] = np.ones(shape, dtype=dt)
    for _ in range(a.warmup):
        sess.run(None, feed)
    t = np.empty(a.runs)
    for k in range(a.runs):
        t0 = time.perf_counter()
        sess.run(None, feed)
        t[k] = (time.perf_counter() - t0) * 1e3
    row = {
        "peer": "onnxruntime-cpu",
        "onnxruntime": ort.__version__,
        "model": os.path.basename(a.model),
        "label": a.label,
        "inputs": {k: list(v.shape) for k, v in feed.items()},
        "threads": a.threads,
        "runs": a.runs,
        "ms": {q: float(np.percentile(t, v)) for q, v in (("p50", 50), ("p99", 99), ("p99.9", 99.9))},
    }
    print(json.dumps(row), flush=True)
    print(
        f"onnxruntime CPU ({a.threads} thread) {row['model']} {a.label}: p50 {row['ms']['p50']:.3f} ms "
        f"p99 {row['ms']['p99']:.3f} ms",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
