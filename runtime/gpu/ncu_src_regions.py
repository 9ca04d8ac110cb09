# Sums an Nsight Compute source page (`ncu --import R --page source --csv --print-source sass`)
# over the kernel's runs of executed SASS (consecutive instructions executed at least once):
# warp-stall samples and warp-level instructions executed per run, largest first.
# Usage: python3 ncu_src_regions.py SRC.csv[.xz] [N]
import csv, io, lzma, sys
path = sys.argv[1]
text = lzma.open(path, "rt") if path.endswith(".xz") else open(path)
rows = list(csv.reader(text))
h = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
hd = rows[h]
smp = hd.index("Warp Stall Sampling (All Samples)")
exe = hd.index("Instructions Executed")
src = hd.index("Source")
data = [r for r in rows[h + 1:] if len(r) > max(smp, exe)]
tot_s = sum(int(r[smp]) for r in data)
tot_e = sum(int(r[exe]) for r in data)
print(f"{len(data)} SASS instructions, {tot_e} warp instructions executed, {tot_s} stall samples")
runs, start = [], None
for i in range(len(data) + 1):
    live = i < len(data) and int(data[i][exe]) > 0
    if live and start is None:
        start = i
    elif not live and start is not None:
        s = sum(int(r[smp]) for r in data[start:i])
        e = sum(int(r[exe]) for r in data[start:i])
        runs.append((s, e, start, i, data[start][src].strip()))
        start = None
for s, e, a, b, first in sorted(runs, reverse=True)[: int(sys.argv[2]) if len(sys.argv) > 2 else 12]:
    print(f"SASS {a:5d}-{b:5d}: {s:5d} samples ({100 * s / max(tot_s, 1):4.1f} %), "
          f"{e:6d} executed ({100 * e / max(tot_e, 1):4.1f} %)  first: {first[:44]}")
