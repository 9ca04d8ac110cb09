#!/usr/bin/env python3
"""onnxruntime CPU latency of the Silero VAD streaming network, single thread.

The same session options as the package's OnnxWrapper (intra_op_num_threads=1,
inter_op_num_threads=1) and the same inputs as the Rust bench
(`cargo run --release -p tether-vad --example vad_bench`): the WAV through
`silero_vad.read_audio` (not timed), then 512-sample chunks with their 64-sample
context, the recurrent state and sr=16000 fed to `session.run` one chunk at a
time (the file restarts with a zero state at its end). Only `session.run` is
timed; 50 warm-up chunks, then --runs timed chunks. Prints p50 / p99 / mean in
microseconds, the CPU model and the load average.

    python bench_ort.py --model silero_vad_op18_ifless.onnx --wav Front_Center.wav [--runs 2000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import onnxruntime as ort

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "family", "golden"))
import ortbench  # noqa: E402
warnings.filterwarnings("ignore")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--wav", required=True)
    ap.add_argument("--runs", type=int, default=2000)
    args = ap.parse_args(argv)
    from silero_vad import read_audio

    wav = read_audio(args.wav, 16000).numpy().astype(np.float32)
    chunks = [wav[i:i + 512] for i in range(0, len(wav) - 511, 512)]
    sess = ortbench.single_thread_session(args.model)
    sr = np.array(16000, dtype=np.int64)
    state = np.zeros((2, 1, 128), dtype=np.float32)
    context = np.zeros((1, 64), dtype=np.float32)
    times = []
    k = 0
    for i in range(args.runs + 50):
        if k == len(chunks):
            state[:] = 0
            context[:] = 0
            k = 0
        x = np.concatenate([context, chunks[k][None]], axis=1)
        t = time.perf_counter()
        out, state = sess.run(None, {"input": x, "state": state, "sr": sr})
        dt = time.perf_counter() - t
        context = x[:, -64:]
        k += 1
        if i >= 50:
            times.append(dt * 1e6)
    times = np.sort(np.array(times))
    print(f"onnxruntime {ort.__version__} CPU, Silero VAD streaming, 1 thread, {args.runs} chunks of 512 samples")
    print(f"cpu: {ortbench.cpu_model()}")
    print(f"loadavg: {ortbench.loadavg()}")
    print(f"per chunk: p50 {np.percentile(times, 50):.1f} us, p99 {np.percentile(times, 99):.1f} us, "
          f"mean {times.mean():.1f} us; real-time factor {times.mean() / 32000:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
