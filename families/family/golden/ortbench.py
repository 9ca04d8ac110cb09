"""What the families' onnxruntime CPU benchmarks (`<family>/golden/bench_ort.py`) share:
the host description their output ends with and the single-thread session they time.

A bench script imports it with

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "family", "golden"))
    import ortbench

Standard library only at import; `single_thread_session` imports onnxruntime.
"""

from __future__ import annotations

import os
import platform

# `/proc/cpuinfo` keys that name the CPU: x86 (`model name`), Arm (`Model`, `Processor`),
# others (`cpu model`).
_CPU_KEYS = ("model name", "Model", "Processor", "cpu model")


def cpu_model() -> str:
    """The host CPU's name from /proc/cpuinfo, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() in _CPU_KEYS:
                    return val.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def loadavg() -> str:
    """/proc/loadavg as the kernel writes it (1, 5 and 15 minute load averages, runnable
    and total tasks, last PID), else the three averages: a shared host is often busy, and
    a contended measurement can be recognised by it."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().strip()
    except OSError:
        return " ".join(f"{a:.2f}" for a in os.getloadavg())


def single_thread_session(model: str, sequential: bool = False):
    """An onnxruntime CPU session of `model` on one thread (intra_op_num_threads=1,
    inter_op_num_threads=1, as silero-vad's OnnxWrapper sets them); `sequential` also
    sets ORT_SEQUENTIAL execution."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    if sequential:
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
