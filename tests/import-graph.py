#!/usr/bin/env python3
"""The import graph of a Rust source folder: which of its modules import which.

Reads every `.rs` file under FOLDER (one module each: `x.rs` and `x/mod.rs` are module `x`,
`FOLDER/mod.rs` is the folder's own module), resolves the paths each one names through
`use` declarations and inline paths (`super::`, `self::`, `crate::<folder path>::`, a child
module's name) to the module that defines the named item (the longest prefix that is a
module), and prints:

* files: every module, its file, its line count and its stage (with --stage);
* imports: every module and the modules it imports;
* outside the folder: what each module imports from the rest of the crate (`crate::...`)
  and from other crates (`cudarc`, `tract_onnx`, ...), standard library aside;
* import circles: the strongly connected components of more than one module (Tarjan);
* back-up imports (with --stage): imports of a module in a later stage than the importer's.

`#[cfg(test)]` items (test modules) are left out unless --include-tests: tests may import
whatever they check. Comments, strings and character literals are ignored. A `mod x;`
declaration is structure, not an import; `pub use x::Y` is one.

Usage:
  tests/import-graph.py runtime/src/native
  tests/import-graph.py runtime/src/native --stage ir=ir,ir::* --stage ops=ops,ops::* ... --check

--stage NAME=PATTERN[,PATTERN...] (repeated, in pipeline order): the modules of a stage,
by shell-style patterns over module paths relative to FOLDER (`ir`, `ir::*`; the folder's
own module is its name in the crate, e.g. `native`). A module matching no stage is reported. --check exits 1 on an import
circle, a back-up import or (with stages) an unstaged module. Python 3 standard library
only.
"""

import argparse
import fnmatch
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# Crates that are not of interest as dependencies (the language's own).
STD = {"std", "core", "alloc"}


def strip(src):
    """The source with comments, string and character literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and not re.match(r"\w", src[i - 1 : i] or " "):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            # A character literal ('x', '\n', '\u{..}'), else a lifetime or label.
            m = re.match(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", src[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def item_end(code, i):
    """The end of the item starting at `i`: after its `;` or its balanced `{...}`."""
    depth = 0
    n = len(code)
    while i < n:
        c = code[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "{":
            # The item's body: skip to the matching brace.
            d, j = 1, i + 1
            while j < n and d:
                d += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            return j
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def drop_test_items(code):
    """`code` without the items under `#[cfg(test)]`, and the names of test-only child
    modules declared as files (`#[cfg(test)] mod tests;`)."""
    test_mods = set()
    out, i = [], 0
    for m in re.finditer(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]", code):
        if m.start() < i:
            continue
        j = m.end()
        # Further attributes on the same item.
        while True:
            a = re.match(r"\s*#\s*\[", code[j:])
            if not a:
                break
            d, k = 1, j + a.end()
            while k < len(code) and d:
                d += {"[": 1, "]": -1}.get(code[k], 0)
                k += 1
            j = k
        decl = re.match(r"\s*(pub(\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", code[j:])
        if decl:
            test_mods.add(decl.group(3))
        end = item_end(code, j)
        out.append(code[i : m.start()])
        out.append(re.sub(r"[^\n]", " ", code[m.start() : end]))
        i = end
    out.append(code[i:])
    return "".join(out), test_mods


def split_top(s, sep=","):
    """Split `s` at `sep` outside braces."""
    parts, depth, cur = [], 0, []
    for c in s:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def use_paths(tree, prefix=()):
    """The paths (lists of segments) a `use` tree names."""
    tree = re.sub(r"\s+", " ", tree).strip()
    if not tree:
        return []
    tree = re.sub(r"\s+as\s+" + IDENT + r"$", "", tree)
    brace = tree.find("{")
    if brace >= 0 and tree.endswith("}"):
        head = [s.strip() for s in tree[:brace].split("::") if s.strip()]
        paths = []
        for part in split_top(tree[brace + 1 : -1]):
            if part == "self":
                paths.append(list(prefix) + head)
            else:
                paths.extend(use_paths(part, tuple(prefix) + tuple(head)))
        return paths
    segs = [s.strip() for s in tree.split("::") if s.strip()]
    if segs and segs[-1] == "self":
        segs = segs[:-1]
    if segs and segs[-1] == "*":
        segs = segs[:-1]
    return [list(prefix) + segs]


class Graph:
    def __init__(self, root, crate_path, include_tests):
        self.root = root
        self.crate_path = crate_path  # e.g. ["native"]
        self.files = {}  # module tuple -> (file, lines, code)
        skipped = set()
        for d, _, names in os.walk(root):
            for f in sorted(names):
                if not f.endswith(".rs"):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root)[:-3].split(os.sep)
                if rel[-1] == "mod":
                    rel = rel[:-1]
                mod = tuple(rel)
                with open(path, encoding="utf-8") as fh:
                    src = fh.read()
                code = strip(src)
                if not include_tests:
                    code, test_mods = drop_test_items(code)
                    skipped.update(mod + (t,) for t in test_mods)
                self.files[mod] = (os.path.relpath(path, root), src.count("\n"), code)
        for m in list(self.files):
            if any(m[: len(s)] == s for s in skipped):
                del self.files[m]
        self.modules = set(self.files)
        self.imports = {m: set() for m in self.modules}
        self.outside = {m: set() for m in self.modules}
        self.aliases = {m: set() for m in self.modules}
        for m in sorted(self.modules):
            self._scan(m)

    def children(self, m):
        return {c[-1] for c in self.modules if len(c) == len(m) + 1 and c[: len(m)] == m}

    def resolve(self, m, segs):
        """(module inside the folder, or None; outside name, or None) of path `segs` named
        in module `m`."""
        if not segs:
            return None, None
        if segs[0] == "crate":
            rest = segs[1:]
            if rest[: len(self.crate_path)] == self.crate_path:
                base, rest = (), rest[len(self.crate_path) :]
            else:
                return None, "crate::" + "::".join(rest[:1])
        elif segs[0] in ("super", "self"):
            base, rest = list(m), list(segs)
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    if not base:
                        # Above the folder: a path into the rest of the crate.
                        up = self.crate_path[:-1]
                        k = 1
                        while k < len(rest) and rest[k] == "super":
                            up, k = up[:-1], k + 1
                        tail = up + rest[k:]
                        return None, "crate::" + "::".join(tail[:1])
                    base = base[:-1]
                rest = rest[1:]
            base = tuple(base)
        elif segs[0] in self.children(m):
            base, rest = m, segs
        else:
            return None, segs[0]
        target = tuple(base)
        for s in rest:
            if target + (s,) in self.modules:
                target = target + (s,)
            else:
                break
        return target, None

    def _add(self, m, segs):
        target, outside = self.resolve(m, segs)
        if target is not None and target != m and target in self.modules:
            self.imports[m].add(target)
        elif (
            outside
            and outside not in STD
            and outside not in self.aliases[m]
            and not outside[0].isupper()
        ):
            self.outside[m].add(outside)

    def _scan(self, m):
        code = self.files[m][2]
        uses = []
        # Names a `use` brings into scope (`use cudarc::cudnn::sys;` makes `sys::` no crate).
        self.aliases[m] = set()
        for u in re.finditer(r"\buse\s+([^;]+);", code):
            for a in re.findall(r"(" + IDENT + r")\s*(?:[,}]|$)", u.group(1)):
                self.aliases[m].add(a)
            for a in re.findall(r"\bas\s+(" + IDENT + r")", u.group(1)):
                self.aliases[m].add(a)
        for u in re.finditer(r"\buse\s+([^;]+);", code):
            uses.append((u.start(), u.end()))
            for p in use_paths(u.group(1)):
                p = [s for s in p if s]
                if p and p[0] == "":
                    p = p[1:]
                self._add(m, p)
        # Inline paths outside the `use` declarations.
        rest = list(code)
        for a, b in uses:
            rest[a:b] = " " * (b - a)
        rest = "".join(rest)
        heads = ["crate", "super", "self"] + sorted(self.children(m))
        pat = r"(?<![\w:])((?:" + "|".join(map(re.escape, heads)) + r")(?:\s*::\s*" + IDENT + r")+)"
        for p in re.finditer(pat, rest):
            self._add(m, [s.strip() for s in p.group(1).split("::")])
        # Other crates named inline (`cudarc::...`, `tract_onnx::...`).
        for p in re.finditer(r"(?<![\w:])(" + IDENT + r")\s*::\s*" + IDENT, rest):
            name = p.group(1)
            if name in heads or name[0].isupper() or name in STD or name in self.aliases[m]:
                continue
            if name in ("crate", "super", "self", "Self"):
                continue
            # A local item in scope (an enum's variants, a type's associated items) is not
            # a crate; only names that a `use` or an extern could bring: lower-case crates.
            if re.search(r"\b(use|extern\s+crate)\s+" + re.escape(name) + r"\b", code) or name in KNOWN_CRATES:
                self.outside[m].add(name)

    def sccs(self):
        index, low, on, stack, out = {}, {}, set(), [], []
        counter = [0]

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in sorted(self.imports[v]):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

        sys.setrecursionlimit(10000)
        for v in sorted(self.modules):
            if v not in index:
                visit(v)
        return sorted(out)


KNOWN_CRATES = {"cudarc", "tract_onnx", "tract_core", "tract_linalg", "half", "libc", "log",
                "thiserror", "libloading", "crc32fast", "zerocopy", "tether_targets",
                "tether_bundle", "heapless"}


ROOT_NAME = ["self"]


def name(m):
    return "::".join(m) if m else ROOT_NAME[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--crate-path", help="the folder's module path in its crate, e.g. "
                    "`native` (default: the path after `src/`)")
    ap.add_argument("--stage", action="append", default=[], metavar="NAME=PATTERN[,PATTERN]")
    ap.add_argument("--include-tests", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 on an import circle, a back-up import or an unstaged module")
    args = ap.parse_args()
    folder = os.path.normpath(args.folder)
    if args.crate_path is not None:
        crate_path = [s for s in args.crate_path.split("::") if s]
    else:
        parts = folder.split(os.sep)
        crate_path = parts[len(parts) - parts[::-1].index("src") :] if "src" in parts else []
    g = Graph(folder, crate_path, args.include_tests)
    ROOT_NAME[0] = crate_path[-1] if crate_path else "crate"

    stages = []
    for s in args.stage:
        label, _, pats = s.partition("=")
        stages.append((label, [p for p in pats.split(",") if p]))

    def stage_of(m):
        for i, (_, pats) in enumerate(stages):
            if any(fnmatch.fnmatchcase(name(m), p) for p in pats):
                return i
        return None

    problems = 0
    mods = sorted(g.modules)
    print(f"{folder} (crate::{'::'.join(crate_path)}): {len(mods)} modules, "
          f"{sum(g.files[m][1] for m in mods)} lines")
    print("\nfiles:")
    for m in mods:
        st = stage_of(m)
        tag = f"  [{stages[st][0]}]" if stages and st is not None else ("  [no stage]" if stages else "")
        print(f"  {name(m):28} {g.files[m][0]:32} {g.files[m][1]:6} lines{tag}")
    print("\nimports:")
    for m in mods:
        print(f"  {name(m):28} -> {', '.join(name(t) for t in sorted(g.imports[m])) or '-'}")
    print("\noutside the folder:")
    for m in mods:
        if g.outside[m]:
            print(f"  {name(m):28} -> {', '.join(sorted(g.outside[m]))}")
    circles = g.sccs()
    print("\nimport circles:" + (" none" if not circles else ""))
    for c in circles:
        print("  " + " <-> ".join(name(m) for m in c))
        problems += 1
    if stages:
        print("\nstages: " + " -> ".join(label for label, _ in stages))
        unstaged = [m for m in mods if stage_of(m) is None]
        for m in unstaged:
            print(f"  unstaged: {name(m)}")
            problems += 1
        back = [(m, t) for m in mods for t in sorted(g.imports[m])
                if stage_of(m) is not None and stage_of(t) is not None
                and stage_of(t) > stage_of(m)]
        print("back-up imports:" + (" none" if not back else ""))
        for m, t in back:
            print(f"  {name(m)} [{stages[stage_of(m)][0]}] -> {name(t)} [{stages[stage_of(t)][0]}]")
            problems += 1
    if args.check and problems:
        print(f"\nimport-graph: {problems} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
