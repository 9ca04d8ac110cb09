#!/usr/bin/env python3
"""CPU latency of the reference pipeline, single-threaded, for
docs/evidence/ocr-cpu.md: rapidocr-onnxruntime 1.4.4's RapidOCR() with
intra_op_num_threads=1 and inter_op_num_threads=1, on the decoded image
(a BGR ndarray, so file decoding is not timed), after warm-up runs.

Prints, per image, the median and 90th percentile of the whole call and of
the package's own stage timers (det: resize + network + DB post-processing;
cls and rec: network + post-processing).

Usage: python bench_ort.py --assets DIR [--runs 10] [--warmup 2]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import onnxruntime
from rapidocr_onnxruntime import RapidOCR

from reference import make_engine


def pct(v: list[float], q: float) -> float:
    return float(np.percentile(np.array(v) * 1000.0, q))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--assets", required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    e: RapidOCR = make_engine(args.assets, threads=1)
    opts = e.text_det.infer.session.get_session_options()
    print(
        f"onnxruntime {onnxruntime.__version__}, intra_op_num_threads={opts.intra_op_num_threads}, "
        f"inter_op_num_threads={opts.inter_op_num_threads}"
    )
    for name in ["page.png", "text.png"]:
        img = e.load_img(os.path.join(args.assets, name))
        for _ in range(args.warmup):
            e(img)
        total, det, cls, rec = [], [], [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            res, el = e(img)
            total.append(time.perf_counter() - t0)
            det.append(el[0])
            cls.append(el[1])
            rec.append(el[2])
        print(
            f"{name}: total p50 {pct(total, 50):.1f} ms p90 {pct(total, 90):.1f} ms | "
            f"det p50 {pct(det, 50):.1f} | cls p50 {pct(cls, 50):.1f} | rec p50 {pct(rec, 50):.1f} ms "
            f"({len(res)} lines, {args.runs} runs)"
        )


if __name__ == "__main__":
    main()
