# Maps an Nsight Compute source page (`ncu --import R --page source --csv --print-source sass`)
# of one kernel onto the CUDA source lines of the same kernel image: the i-th SASS row of the
# page is the i-th instruction of the kernel in `nvdisasm -g -c` of the image's cubin (the
# opcodes are checked to agree). Prints the stall samples and executed warp instructions per
# source line, and per segment between cluster barrier waits (`UCGABAR_WAIT`, `CGAERRBAR`),
# each segment with its busiest lines: for a kernel whose phases end at cluster barriers
# (`layer`), the time of each phase relative to the others.
# Usage:
#   cuobjdump --extract-elf llm.sm_90 families/llm/kernels/bin/llm.cu13.fatbin
#   nvdisasm -g -c llm.sm_90.cubin > llm.sm_90.sass
#   python3 ncu_src_lines.py llm.sm_90.sass KERNEL SRC.csv[.xz] families/llm/kernels/llm.cu
# (cuobjdump and nvdisasm: the `nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm` wheels.)
import collections, csv, lzma, re, sys

sass_path, kernel, csv_path, cu_path = sys.argv[1:5]
lines = open(sass_path).read().split("\n")
start = next(i for i, l in enumerate(lines) if l.startswith(f".text.{kernel}:"))
ins, cur = [], None
for l in lines[start + 1:]:
    if l.strip().startswith(".section"):
        break
    m = re.search(r"//## File .*, line (\d+)", l)
    if m:
        cur = int(m.group(1))
        continue
    m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;", l)
    if m:
        ins.append((m.group(2), cur))
text = lzma.open(csv_path, "rt") if csv_path.endswith(".xz") else open(csv_path)
rows = list(csv.reader(text))
h = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
hd = rows[h]
smp, exe, src = (hd.index(k) for k in ("Warp Stall Sampling (All Samples)", "Instructions Executed", "Source"))
data = [r for r in rows[h + 1:] if len(r) > max(smp, exe)]
if len(data) != len(ins):
    sys.exit(f"{len(data)} SASS rows in the page, {len(ins)} instructions in {kernel}: not the same image")
op = lambda t: t.split()[1] if t.startswith("@") else t.split()[0]
bad = sum(op(a) != op(b[src].strip()) for (a, _), b in zip(ins, data))
if bad:
    sys.exit(f"{bad} opcodes differ: not the same image")
code = open(cu_path).read().split("\n")
show = lambda ln: code[ln - 1].strip()[:80] if ln else "?"
tot = sum(int(r[smp]) for r in data)
print(f"{kernel}: {len(ins)} instructions, {tot} stall samples")
per, pere = collections.Counter(), collections.Counter()
for (_, ln), r in zip(ins, data):
    per[ln] += int(r[smp])
    pere[ln] += int(r[exe])
print("-- source lines, most samples first")
for ln, s in per.most_common(20):
    print(f"{ln:5d} {s:6d} {100 * s / max(tot, 1):5.1f} %  exe {pere[ln]:7d}  {show(ln)}")
print("-- segments ending at a cluster barrier wait")
seg, a = [], 0
for i, (t, _) in enumerate(ins):
    if "UCGABAR_WAIT" in t or "CGAERRBAR" in t or i == len(ins) - 1:
        seg.append((a, i))
        a = i + 1
for a, b in seg:
    c = collections.Counter()
    for (_, ln), r in zip(ins[a:b + 1], data[a:b + 1]):
        c[ln] += int(r[smp])
    s = sum(c.values())
    top = ", ".join(f"{ln}:{v}" for ln, v in c.most_common(5))
    print(f"SASS {a:5d}-{b:5d}: {s:6d} samples ({100 * s / max(tot, 1):4.1f} %)  lines {top}")
