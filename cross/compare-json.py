#!/usr/bin/env python3
"""Compare two `tether run --json` outputs (aarch64 under QEMU vs native x86_64).

Same structure, same strings, numbers equal within a tolerance: the two CPUs
run different SIMD kernels (NEON vs AVX) and sum in a different order, so
scores and box coordinates may differ in the last digits; a detection may
not appear or vanish. Keys that measure time, name files or count the
machine's threads are ignored.

Usage: compare-json.py A.json B.json [--rel 1e-3] [--abs 1e-2]
Exit 0 when they agree; the last line of output is a one-line summary.
"""
import argparse
import json
import math
import re
import sys

IGNORED = re.compile(
    r"(time|_ms$|_us$|_ns$|^ms$|^us$|elapsed|latency|duration|timestamp|seconds|path|file|host|^date$|_date$|threads)",
    re.IGNORECASE,
)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rel", type=float, default=1e-3)
    p.add_argument("--abs", type=float, default=1e-2)
    args = p.parse_args()
    with open(args.a) as f:
        a = json.load(f)
    with open(args.b) as f:
        b = json.load(f)

    stats = {"numbers": 0, "max_abs": 0.0, "max_rel": 0.0, "ignored": set()}
    errors = []

    def walk(x, y, path):
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if IGNORED.search(k):
                    stats["ignored"].add(k)
                    continue
                if k not in x or k not in y:
                    errors.append(f"{path}/{k}: only in {'A' if k in x else 'B'}")
                    continue
                walk(x[k], y[k], f"{path}/{k}")
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                errors.append(f"{path}: {len(x)} items vs {len(y)}")
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{path}[{i}]")
        elif isinstance(x, bool) or isinstance(y, bool):
            if x != y:
                errors.append(f"{path}: {x!r} vs {y!r}")
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)):
            stats["numbers"] += 1
            d = abs(float(x) - float(y))
            r = d / max(abs(float(x)), abs(float(y)), 1e-30)
            stats["max_abs"] = max(stats["max_abs"], d)
            if d > args.abs:
                stats["max_rel"] = max(stats["max_rel"], r)
            if not (d <= args.abs or r <= args.rel) or math.isnan(d):
                errors.append(f"{path}: {x} vs {y} (abs {d:.3g}, rel {r:.3g})")
        elif x != y:
            errors.append(f"{path}: {x!r} vs {y!r}")

    walk(a, b, "")
    for e in errors[:50]:
        print(e)
    ignored = ", ".join(sorted(stats["ignored"])) or "none"
    print(
        f"{stats['numbers']} numbers compared, max abs diff {stats['max_abs']:.3g}, "
        f"{len(errors)} mismatches (tolerance abs {args.abs:g} or rel {args.rel:g}); ignored keys: {ignored}"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
