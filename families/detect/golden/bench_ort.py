#!/usr/bin/env python3
"""onnxruntime CPU latency of one model + input, single thread.

Same session options as reference.py (intra_op_num_threads=1,
inter_op_num_threads=1, sequential execution). The input is prepared once with
reference.py's letterbox preprocessing, which is NOT timed: only
`session.run` is. 10 warm-up runs, then --runs timed runs (default 50);
prints wall-clock p50 / p99 / mean in ms, the host CPU model, and (because a
shared 2-core host is often busy) the process CPU time per run and the load
average, so a contended measurement can be recognised.

    python bench_ort.py --model M.onnx --image I.png --input-size H W [--runs 50]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnxruntime as ort

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "family", "golden"))
import ortbench  # noqa: E402
import reference  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--input-size", nargs=2, type=int, required=True, metavar=("H", "W"))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args(argv)

    img = reference.load_rgb(args.image)
    x, _ = reference.preprocess(img, *args.input_size)
    sess = reference.make_session(args.model)
    feeds = {sess.get_inputs()[0].name: x}
    out_names = [o.name for o in sess.get_outputs()]

    for _ in range(args.warmup):
        sess.run(out_names, feeds)
    times, cpu_times = [], []
    for _ in range(args.runs):
        c0 = time.process_time()
        t0 = time.perf_counter()
        sess.run(out_names, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
        cpu_times.append((time.process_time() - c0) * 1e3)
    t = np.array(times)
    ct = np.array(cpu_times)
    print(f"model {os.path.basename(args.model)}  input {list(x.shape)}  "
          f"onnxruntime {ort.__version__}  threads 1  warmup {args.warmup}  runs {args.runs}")
    print(f"cpu   {ortbench.cpu_model()}")
    print(f"p50 {np.percentile(t, 50):.2f} ms  p99 {np.percentile(t, 99):.2f} ms  "
          f"mean {t.mean():.2f} ms  min {t.min():.2f} ms  max {t.max():.2f} ms")
    # CPU time of this process per run: less sensitive to other load on the host.
    print(f"cpu-time p50 {np.percentile(ct, 50):.2f} ms  mean {ct.mean():.2f} ms")
    print(f"loadavg {os.getloadavg()[0]:.2f} (1 min, after the runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
