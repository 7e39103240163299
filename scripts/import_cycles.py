#!/usr/bin/env python3
"""Finds import circles between the files of src/ (and lab/src/).

    python3 scripts/import_cycles.py              check: fail on a circle not in the baseline
    python3 scripts/import_cycles.py --list       print every circle (strongly connected group)
    python3 scripts/import_cycles.py --selftest   show that a planted circle fails the check

A file imports another when it names it in a path: `use crate::a::b`, `super::b`, `self::b`,
`crate::a::b::Item` in code. Paths are resolved to files (a/b.rs or a/b/mod.rs), the longest
prefix that is a file. Test modules (`#[cfg(test)] mod tests { … }` to the end of the file, and
tests.rs files) are left out: a test may use what it tests.

Circles that exist today are listed in scripts/import_cycles.baseline, one group per line; the
check fails when a group is new or has grown, so the list can only shrink. Remove a line when its
circle is gone (the check says so).
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "scripts" / "import_cycles.baseline"
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)


def module_of(path: Path, src: Path) -> list[str]:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def strip_tests(text: str) -> str:
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{", text)
    text = text[: cut.start()] if cut else text
    text = re.sub(r"//[^\n]*", "", text)  # comments, doc comments
    return text


def resolve(files: dict, base: list[str], segs: list[str]):
    """The file a module path names: the longest prefix that is a file."""
    for n in range(len(segs), -1, -1):
        mod = tuple(base + segs[:n])
        if mod in files:
            return mod
    return None


def graph(src: Path) -> dict:
    files = {}
    for p in src.rglob("*.rs"):
        if p.name == "tests.rs":
            continue
        files[tuple(module_of(p, src))] = p
    edges = {m: set() for m in files}
    for mod, p in files.items():
        text = strip_tests(p.read_text())
        here = list(mod) if p.name in ("mod.rs", "lib.rs", "main.rs") else list(mod)
        parent = here[:-1] if p.name not in ("mod.rs", "lib.rs", "main.rs") else here[:-1]
        # `self` in a mod.rs is the module itself; in a.rs it is a, whose children live in a/.
        bases = {"crate": [], "self": here, "super": parent}

        def add(kind, rest):
            segs = [s for s in rest.split("::") if s]
            base = list(bases[kind])
            while segs and segs[0] == "super":
                base, segs = base[:-1], segs[1:]
            target = resolve(files, base, segs)
            if target is not None and target != mod and not is_ancestor(target, mod):
                edges[mod].add(target)

        for kind, prefix, inner in USE_GROUP.findall(text):
            for item in re.split(r",", re.sub(r"\{[^{}]*\}", "", inner)):
                item = item.strip().split(" as ")[0]
                if item and item != "self":
                    add(kind, prefix + "::" + item.split("::")[0] if "::" not in item else prefix + "::" + item)
                elif item == "self":
                    add(kind, prefix)
        for kind, rest in PATH.findall(text):
            add(kind, rest)
    return edges


def is_ancestor(a, b) -> bool:
    """A module's own parents (mod.rs declaring it) are not imports."""
    return len(a) < len(b) and tuple(b[: len(a)]) == a


def cycles(edges: dict) -> list[frozenset]:
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(frozenset(group))

    for v in edges:
        if v not in index:
            strong(v)
    return out


def name(crate: str, mod) -> str:
    return crate + "::" + "::".join(mod) if mod else crate


def all_groups() -> list[set[str]]:
    groups = []
    for crate, src in (("dedupd", ROOT / "src"), ("dedupd_lab", ROOT / "lab" / "src")):
        if src.is_dir():
            for g in cycles(graph(src)):
                groups.append({name(crate, m) for m in g})
    return groups


def check(groups, baseline) -> list[str]:
    problems = []
    for g in groups:
        if not any(g <= b for b in baseline):
            problems.append("new import circle: " + " ".join(sorted(g)))
    for b in baseline:
        if not any(g & b for g in groups):
            problems.append("gone, remove it from the baseline: " + " ".join(sorted(b)))
    return problems


def read_baseline() -> list[set[str]]:
    if not BASELINE.exists():
        return []
    return [set(l.split()) for l in BASELINE.read_text().splitlines() if l.strip() and not l.startswith("#")]


def main() -> int:
    groups = all_groups()
    if "--list" in sys.argv:
        for g in groups:
            print(" ".join(sorted(g)))
        return 0
    if "--selftest" in sys.argv:
        planted = {"dedupd::planted::a", "dedupd::planted::b"}
        problems = check(groups + [planted], read_baseline())
        ok = any("planted" in p for p in problems)
        print("import_cycles selftest:", "a planted circle fails the check" if ok else "NOT caught")
        return 0 if ok else 1
    problems = check(groups, read_baseline())
    for p in problems:
        print("import_cycles:", p)
    files = sum(len(g) for g in groups)
    print(f"import_cycles: {len(groups)} circle(s) over {files} files, all in the baseline" if not problems
          else f"import_cycles: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
