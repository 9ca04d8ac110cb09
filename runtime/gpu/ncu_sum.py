# Sums ncu's per-kernel gpu__time_duration (CSV, --page raw) by kernel name, or by kernel name
# and grid size when the CSV has launch__grid_size (blocks) too.
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
h = rows[hdr]
kn, tm = h.index("Kernel Name"), h.index("gpu__time_duration.sum")
gs = h.index("launch__grid_size") if "launch__grid_size" in h else None
unit = rows[hdr + 1][tm] if len(rows) > hdr + 1 else "?"
tot, cnt = collections.Counter(), collections.Counter()
for r in rows[hdr + 1:]:
    try:
        v = float(r[tm].replace(",", ""))
    except (ValueError, IndexError):
        continue
    key = r[kn] if gs is None else f"{r[kn]} ({r[gs]} blocks)"
    tot[key] += v
    cnt[key] += 1
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1.0)
print(f"kernel time of one eager chunk run (unit read: {unit}), {sum(cnt.values())} launches")
for k, v in tot.most_common():
    print(f"{k:36s} {cnt[k]:4d} launches {v * scale:9.1f} us total {v * scale / cnt[k]:7.2f} us each")
print(f"{'sum':36s} {sum(cnt.values()):4d} launches {sum(tot.values()) * scale:9.1f} us")
