#!/usr/bin/env python3
"""Finds import circles between the files of src/ (and lab/src/).

    python3 scripts/import_cycles.py              check: fail on a circle not in the baseline
    python3 scripts/import_cycles.py --list       print every circle (strongly connected group)
    python3 scripts/import_cycles.py --edges      print every file's imports
    python3 scripts/import_cycles.py --selftest   plant circles in a copy of the source; they fail

The files are the crate's module tree: from lib.rs, every `mod x;` that is not behind
`#[cfg(test)]` (x.rs or x/mod.rs). Test modules and test-only imports are left out: a test may
use what it tests.

A file imports another when it names it in a path: `use crate::a::b::Item`, `super::b`,
`self::b`, a child module (`b::Item`), or `crate::a::b::Item` in code. A path is followed
through the module tree and through re-exports: when `a/mod.rs` says `pub use b::Item` (or
`pub use b::*`), `crate::a::Item` names the file that defines `Item`, and `a/mod.rs` itself
imports `a/b.rs`. So a circle through a re-export is a circle. A file naming one of its own
parent modules is not an import (the parent declares it).

Circles that exist today are listed in scripts/import_cycles.baseline, one group per line; the
check fails when a group is new or has grown, so the list can only shrink. Remove a line when its
circle is gone (the check says so).
"""
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rust_source import blank, cfg_test_spans, without  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "scripts" / "import_cycles.baseline"
CRATES = (("dedupd", Path("src")), ("dedupd_lab", Path("lab") / "src"))

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
MOD_DECL = re.compile(rf"\bmod\s+(?:r#)?({IDENT})\s*([;{{])")
USE = re.compile(r"(?<![\w:])use\s+([^;]*);")
CODE_PATH = re.compile(rf"(?<![\w:])({IDENT})((?:\s*::\s*{IDENT})+)")
DEF = re.compile(
    rf"\b(?:fn|struct|enum|trait|type|const|static|union|mod|macro_rules!)\s+(?:r#)?({IDENT})"
)


class Module:
    def __init__(self, path: tuple, file: Path, code: str):
        self.path, self.file, self.code = path, file, code
        self.children: set[str] = set()
        self.uses: list[list[str]] = []  # every `use` path, as written
        self.bindings: dict[str, list[list[str]]] = {}  # name -> the paths it stands for
        self.globs: list[list[str]] = []  # `use a::*` sources
        self.defs = set(DEF.findall(code))


def use_tree(text: str) -> list[tuple[list[str], str | None, bool]]:
    """The leaves of a use tree: (path, alias, is glob). `a::{b, c::d as e, f::*, self}`."""
    tokens = re.findall(rf"::|[{{}},*]|{IDENT}", text)
    pos = 0

    def tree(prefix: list[str]) -> list:
        nonlocal pos
        out, segs = [], list(prefix)
        while pos < len(tokens):
            t = tokens[pos]
            if t == "::":
                pos += 1
            elif t == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    out += tree(segs)
                    if pos < len(tokens) and tokens[pos] == ",":
                        pos += 1
                pos += 1
                return out
            elif t == "*":
                pos += 1
                return out + [(segs, None, True)]
            elif t in (",", "}"):
                break
            elif t == "as":
                alias = tokens[pos + 1] if pos + 1 < len(tokens) else None
                pos += 2
                return out + [(segs, alias, False)]
            else:
                segs = segs + [t]
                pos += 1
        if len(segs) > len(prefix):
            out.append((segs, None, False))
        return out

    return tree([])


def read_crate(src: Path) -> dict:
    """The crate's modules by path, following `mod` declarations from lib.rs."""
    modules = {}

    def visit(path: tuple, file: Path):
        code = blank(file.read_text())
        code = without(code, cfg_test_spans(code))
        mod = modules[path] = Module(path, file, code)
        folder = file.parent if file.name in ("lib.rs", "mod.rs", "main.rs") else file.with_suffix("")
        for name, end in MOD_DECL.findall(code):
            if end == "{":  # an inline module: its code is read as the file's
                continue
            mod.children.add(name)
            for child in (folder / f"{name}.rs", folder / name / "mod.rs"):
                if child.is_file():
                    visit(path + (name,), child)
                    break
        for m in USE.finditer(code):
            for segs, alias, glob in use_tree(m.group(1)):
                if not segs:
                    continue
                if segs[-1] == "self":
                    segs = segs[:-1]
                mod.uses.append(segs)
                if glob:
                    mod.globs.append(segs)
                elif segs:
                    mod.bindings.setdefault(alias or segs[-1], []).append(segs)

    root = src / "lib.rs"
    if root.is_file():
        visit((), root)
    return modules


class Crate:
    def __init__(self, src: Path):
        self.modules = read_crate(src)

    def absolute(self, here: tuple, segs: list[str], depth=0) -> list[str] | None:
        """A path as written in module `here`, from the crate root; None for other crates."""
        if not segs:
            return None
        first, rest = segs[0], segs[1:]
        if first == "crate":
            return rest
        if first in ("self", "super"):
            base = list(here)
            while segs and segs[0] in ("self", "super"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            return base + segs
        mod = self.modules.get(here)
        if mod is None:
            return None
        if first in mod.children:
            return list(here) + segs
        if first in mod.bindings and depth < 8:
            for target in mod.bindings[first]:
                if target[0] != first or len(target) > 1:
                    full = self.absolute(here, target, depth + 1)
                    if full is not None:
                        return full + rest
        return None  # another crate: std, serde, …

    def files(self, segs: list[str], depth=0) -> set[tuple]:
        """The files a path from the crate root names: through modules, then re-exports."""
        mod, i = (), 0
        while i < len(segs) and mod + (segs[i],) in self.modules:
            mod, i = mod + (segs[i],), i + 1
        rest = segs[i:]
        if not rest or depth > 16:
            return {mod}
        m = self.modules[mod]
        name = rest[0]
        if name in m.bindings and name not in m.defs:
            out = set()
            for target in m.bindings[name]:
                full = self.absolute(mod, target)
                if full is not None:
                    out |= self.files(full + rest[1:], depth + 1)
            return out or {mod}
        if name not in m.defs:
            for source in m.globs:
                full = self.absolute(mod, source)
                if full is None:
                    continue
                inner = self.files(full, depth + 1)
                for f in inner:
                    g = self.modules[f]
                    if name in g.defs or name in g.bindings or name in g.children:
                        return self.files(list(f) + rest, depth + 1)
        return {mod}

    def edges(self) -> dict:
        out = {}
        for here, m in self.modules.items():
            named = list(m.uses)
            for first, rest in CODE_PATH.findall(m.code):
                if first in ("crate", "self", "super") or first in m.children:
                    named.append([first] + [s.strip() for s in rest.split("::") if s.strip()])
            targets = set()
            for segs in named:
                full = self.absolute(here, segs)
                if full is not None:
                    targets |= self.files(full)
            out[here] = {t for t in targets if t != here and not is_ancestor(t, here)}
        return out


def is_ancestor(a, b) -> bool:
    """A module's own parents (the mod.rs declaring it) are not imports."""
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


def all_edges(root: Path) -> dict:
    out = {}
    for crate, src in CRATES:
        if (root / src).is_dir():
            for mod, targets in Crate(root / src).edges().items():
                out[name(crate, mod)] = {name(crate, t) for t in targets}
    return out


def all_groups(root: Path) -> list[set[str]]:
    return [set(g) for g in cycles(all_edges(root))]


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


# The circles the self-test plants. The first is one a check blind to re-exports misses: a
# feature's stage imports SliceState through engine/mod.rs's re-export, and engine/slice/state.rs
# imports the list of features, features/mod.rs (the engine imports no feature now, so that line
# is planted too).
PLANT_FILE = Path("src/features/limits/stage.rs")
PLANT_LINE = "use crate::engine::SliceState;\n"
PLANT_MEMBERS = {"dedupd::features::limits::stage", "dedupd::engine::slice::state"}
PLANT_NEEDS = ("dedupd::engine::slice::state", "dedupd::features")
# The engine file that closes it, and the import of `features/` it would need.
ENGINE_FILE = Path("src/engine/slice/state.rs")
ENGINE_LINE = "use crate::features::FEATURES;\n"
# The second needs nothing of today's tree: a module of its own whose mod.rs re-exports an item
# of `inner.rs`, which imports a file that imports the item through the re-export.
FIXTURE = {
    "src/planted/mod.rs": "mod inner;\npub use inner::Item;\n",
    "src/planted/inner.rs": "use crate::planted_user::User;\npub struct Item(User);\n",
    "src/planted_user.rs": "use crate::planted::Item;\npub struct User(Option<Box<Item>>);\n",
}
FIXTURE_MEMBERS = {"dedupd::planted::inner", "dedupd::planted_user"}


def new_circles(root: Path, baseline) -> list[set[str]]:
    prefix = "new import circle: "
    return [set(p[len(prefix) :].split()) for p in check(all_groups(root), baseline) if p.startswith(prefix)]


def selftest() -> int:
    """Copies the sources, checks that the copy passes, plants circles, checks that each fails."""
    baseline = read_baseline()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        for _, src in CRATES:
            if (ROOT / src).is_dir():
                shutil.copytree(ROOT / src, copy / src)
        clean = check(all_groups(copy), baseline)
        print("import_cycles selftest: the unmodified copy", "passes" if not clean else "FAILS: " + "; ".join(clean))
        ok &= not clean

        # The issue's circle: a feature's stage importing the engine's re-export of the slice
        # state. It closes through an engine file that imports `features/` (which the engine
        # no longer does): that import is planted too when the tree lacks it.
        edges = all_edges(copy)
        planted_files = [copy / PLANT_FILE]
        if PLANT_NEEDS[1] not in edges.get(PLANT_NEEDS[0], ()):
            planted_files.append(copy / ENGINE_FILE)
        before = [f.read_text() for f in planted_files]
        for f, text, line in zip(planted_files, before, [PLANT_LINE, ENGINE_LINE]):
            f.write_text(text + line)
        caught = [g for g in new_circles(copy, baseline) if PLANT_MEMBERS <= g]
        for f, text in zip(planted_files, before):
            f.write_text(text)
        lines = " and ".join(f"`{line.strip()}` in {f.relative_to(copy)}"
                             for f, line in zip(planted_files, [PLANT_LINE, ENGINE_LINE]))
        print(f"import_cycles selftest: {lines}:",
              "new import circle: " + " ".join(sorted(caught[0])) if caught else "NOT caught")
        ok &= bool(caught)

        for path, text in FIXTURE.items():
            (copy / path).parent.mkdir(parents=True, exist_ok=True)
            (copy / path).write_text(text)
        lib = copy / "src" / "lib.rs"
        lib.write_text(lib.read_text() + "pub mod planted;\npub mod planted_user;\n")
        caught = [g for g in new_circles(copy, baseline) if FIXTURE_MEMBERS <= g]
        print("import_cycles selftest: a circle through a re-export in a planted module:",
              "new import circle: " + " ".join(sorted(caught[0])) if caught else "NOT caught")
        ok &= bool(caught)
    return 0 if ok else 1


def main() -> int:
    if "--selftest" in sys.argv:
        return selftest()
    if "--edges" in sys.argv:
        for mod, targets in sorted(all_edges(ROOT).items()):
            print(mod, "->", " ".join(sorted(targets)))
        return 0
    groups = all_groups(ROOT)
    if "--list" in sys.argv:
        for g in groups:
            print(" ".join(sorted(g)))
        return 0
    problems = check(groups, read_baseline())
    for p in problems:
        print("import_cycles:", p)
    files = sum(len(g) for g in groups)
    print(f"import_cycles: {len(groups)} circle(s) over {files} files, all in the baseline" if not problems
          else f"import_cycles: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
