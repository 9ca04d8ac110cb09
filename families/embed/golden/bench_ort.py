#!/usr/bin/env python3
"""onnxruntime CPU latency of the all-MiniLM-L6-v2 int8 network, single thread.

The same texts as the Rust bench (`cargo run --release -p tether-embed --example
bench`), tokenised with the `tokenizers` package from the same tokenizer.json
(padding off, truncation 256). Single texts run unpadded (onnxruntime takes any
length); the batch of 8 is padded to the Rust bucket, 16 tokens. Timed:
tokenise + `session.run` + masked mean + L2 normalisation, like
`Embedder::embed`; and tokenisation alone. 3 warm-up runs, then --runs runs;
prints p50 / mean in ms, the CPU model and the load average.

    python bench_ort.py --onnx all-minilm-l6-v2-int8.onnx --tokenizer all-minilm-l6-v2-tokenizer.json [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "family", "golden"))
import ortbench  # noqa: E402

LONG = (
    "Autonomous mobile robots in a warehouse share aisles with people, forklifts and "
    "other robots, so every navigation decision is checked against a map that is "
    "updated many times per second from lidar, cameras and wheel odometry. "
)
TEXTS = [
    "A man is eating food.",
    "Turn left at the next intersection, then go straight for 20 meters.",
    LONG,
    LONG * 2,
    LONG * 8,
]
BATCH = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The robot should stop at the red line.",
    "Where is the charging station?",
    "Pick up the blue cup from the kitchen table.",
    "The quick brown fox jumps over the lazy dog.",
    "I can't find my keys; have you seen them?",
    "A dog is playing in the park.",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args(argv)
    tok = Tokenizer.from_file(args.tokenizer)
    tok.no_padding()
    tok.enable_truncation(256)
    sess = ortbench.single_thread_session(args.onnx, sequential=True)

    def embed(texts, pad_to=None):
        encs = [tok.encode(t) for t in texts]
        n = pad_to or max(len(e.ids) for e in encs)
        ids = np.zeros((len(texts), n), dtype=np.int64)
        mask = np.zeros((len(texts), n), dtype=np.int64)
        for r, e in enumerate(encs):
            ids[r, :len(e.ids)] = e.ids
            mask[r, :len(e.ids)] = 1
        h = sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                                              "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[..., None].astype(np.float32)
        pooled = (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def timed(f):
        out = []
        for i in range(args.runs + 3):
            t = time.perf_counter()
            f()
            if i >= 3:
                out.append((time.perf_counter() - t) * 1e3)
        out = np.array(out)
        return float(np.median(out)), float(out.mean())

    print(f"onnxruntime {ort.__version__} CPU, all-MiniLM-L6-v2 int8, 1 thread, {args.runs} runs per line")
    print(f"cpu: {ortbench.cpu_model()}")
    for text in TEXTS:
        n = len(tok.encode(text).ids)
        p50, mean = timed(lambda: embed([text]))
        tp50, _ = timed(lambda: tok.encode(text))
        print(f"{n:4d} tokens (unpadded): embed p50 {p50:.2f} ms, mean {mean:.2f} ms; tokenise p50 {tp50:.3f} ms")
    p50, mean = timed(lambda: embed(BATCH, pad_to=16))
    print(f"batch of 8 short sentences (padded to 16): p50 {p50:.2f} ms, mean {mean:.2f} ms ({p50 / 8:.2f} ms per sentence)")
    print(f"loadavg: {ortbench.loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
