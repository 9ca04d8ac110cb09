# Reads a log of `tether bench` runs headed "=== before|after MODEL IMAGE RUNS PRECISION" (rounds
# headed "##### round N") and prints, for each model and precision, the p50 in ms (column 4 of
# the report: min, p50, p90, ...) of the `total` row (the frame as timed by the host) and of the
# `floor` row (the frame without the per-stage event nodes) of each round, before and after,
# and the after/before ratio of the medians over the rounds.
import re, sys, collections, statistics
p50 = collections.defaultdict(list)
key = None
for line in open(sys.argv[1]):
    m = re.match(r"=== (before|after) (\S+) \S+ \d+ (\S+)", line)
    if m:
        key = (m.group(2), m.group(3), m.group(1))
        continue
    f = line.split()
    if key and len(f) > 3 and f[0] in ("total", "floor"):
        p50[key + (f[0],)].append(float(f[3]))
print("| model | precision | row | before p50 ms (rounds) | after p50 ms (rounds) | after / before |")
print("|---|---|---|---|---|---|")
for model in dict.fromkeys(k[0] for k in p50):
    for prec in dict.fromkeys(k[1] for k in p50 if k[0] == model):
        for row in ("total", "floor"):
            b, a = p50.get((model, prec, "before", row), []), p50.get((model, prec, "after", row), [])
            r = statistics.median(a) / statistics.median(b) if a and b else float("nan")
            fmt = lambda v: " / ".join(f"{x:.3f}" for x in v)
            print(f"| {model} | {prec} | {row} | {fmt(b)} | {fmt(a)} | {r:.3f} |")
