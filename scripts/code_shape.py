#!/usr/bin/env python3
"""Functions a reader can hold, files on the record path a reader can find their way in.

    python3 scripts/code_shape.py              check: fail on an offender not in the baseline
    python3 scripts/code_shape.py --list       print every offender (the baseline's format)
    python3 scripts/code_shape.py --selftest   plant offenders in a copy of the source; they fail

Limits: no function in src/ over 100 lines (from its `fn` line to its closing brace, counted
with comments, strings and char literals blanked so their braces do not count), and no file
of the record path (src/engine/, src/kafka/, src/filter/, src/features/) over 600 lines. Tests
are left out: tests.rs files, files under a tests/ folder, modules only declared behind
`#[cfg(test)]`, and the items behind `#[cfg(test)]` in the other files.

Offenders that exist today are listed in scripts/code_shape.baseline, one a line, with their
size then: the check fails on an offender not listed or larger than its line says, so the list
can only shrink. Remove a line when its offender is within the limit (the check says so).
"""
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_cycles import read_crate  # noqa: E402
from rust_source import blank, cfg_test_spans, matching_brace, without  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "scripts" / "code_shape.baseline"
MAX_FN = 100
MAX_FILE = 600
RECORD_PATH = ("src/engine/", "src/kafka/", "src/filter/", "src/features/")

FN = re.compile(r"\bfn\s+(?:r#)?([A-Za-z_][A-Za-z0-9_]*)")
BLOCK = re.compile(r"(?m)^[ \t]*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(impl|trait)\b")


def files(root: Path) -> list[Path]:
    """The crate's non-test source files, relative to `root` (main.rs is the binary's root)."""
    out = [m.file.relative_to(root) for m in read_crate(root / "src").values()]
    main = root / "src" / "main.rs"
    if main.is_file():
        out.append(main.relative_to(root))
    return sorted(p for p in out if p.name != "tests.rs" and "tests" not in p.parts)


def line_of(code: str, at: int) -> int:
    return code.count("\n", 0, at) + 1


def owner(header: str) -> str | None:
    """The type an `impl … {` header is for, or the trait a `trait … {` header names."""
    header = re.sub(r"\bwhere\b.*", "", header, flags=re.S)
    depth, plain = 0, []
    for c in header:  # generics out: `impl<T: A<B>> X<T> for Y<T>` -> `impl X for Y`
        depth += c == "<"
        if depth == 0:
            plain.append(c)
        depth -= c == ">" and depth > 0
    parts = re.split(r"\bfor\b", "".join(plain))
    m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", parts[-1].strip())
    return m.group(1) if m else None


def functions(code: str) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of every function with a body in blanked code."""
    owners = []  # (start, end, name) of impl and trait blocks
    for m in BLOCK.finditer(code):
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue
        name = owner(code[m.end() : brace])
        if name:
            owners.append((brace, matching_brace(code, brace), name))
    out = []
    for m in FN.finditer(code):
        depth, k = 0, m.end()
        while k < len(code):  # the body's `{`: the first at bracket depth 0, unless `;` comes first
            c = code[k]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif depth == 0 and c in "{;":
                break
            k += 1
        if k >= len(code) or code[k] == ";":
            continue
        end = matching_brace(code, k)
        inside = [o for o in owners if o[0] < m.start() < o[1]]
        name = (max(inside)[2] + "::" if inside else "") + m.group(1)
        first = line_of(code, m.start())
        out.append((name, first, line_of(code, end) - first + 1))
    return out


def offenders(root: Path) -> dict[str, int]:
    """`fn path name` and `file path` keys, with their sizes."""
    out = {}
    for rel in files(root):
        text = (root / rel).read_text()
        code = blank(text)
        code = without(code, cfg_test_spans(code))
        path = rel.as_posix()
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if path.startswith(RECORD_PATH) and lines > MAX_FILE:
            out[f"file {path}"] = lines
        for name, _, n in functions(code):
            if n > MAX_FN:
                key = f"fn {path} {name}"
                out[key] = max(n, out.get(key, 0))
    return out


def read_baseline() -> dict[str, int]:
    out = {}
    if BASELINE.exists():
        for line in BASELINE.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, size = line.rsplit(maxsplit=1)
                out[key] = int(size)
    return out


def check(found: dict[str, int], baseline: dict[str, int]) -> list[str]:
    problems = []
    for key, n in sorted(found.items()):
        limit = MAX_FILE if key.startswith("file ") else MAX_FN
        if key not in baseline:
            problems.append(f"new: {key}: {n} lines (at most {limit})")
        elif n > baseline[key]:
            problems.append(f"grown: {key}: {n} lines, the baseline allows {baseline[key]} (at most {limit})")
    for key in sorted(baseline):
        if key not in found:
            problems.append(f"within the limit now, remove it from the baseline: {key}")
    return problems


def selftest() -> int:
    """A copy of src/ passes; a long function and a long record-path file planted in it fail, and
    a function at the limit or behind #[cfg(test)] does not."""
    baseline = read_baseline()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        shutil.copytree(ROOT / "src", copy / "src")
        clean = check(offenders(copy), baseline)
        # Any record-path file within the limit will do: the first in order.
        rel = next(
            p for p in files(copy) if p.as_posix().startswith(RECORD_PATH) and f"file {p.as_posix()}" not in baseline
        )
        # Braces in strings and comments must not count.
        line = '    let _x = "{ } // ";\n'

        def planted_fn(head: str, lines: int) -> str:
            return f"\n{head} {{\n" + line * (lines - 2) + "}\n"

        planted = (
            planted_fn("pub fn planted_long()", 103)
            + planted_fn("fn planted_at_the_limit()", 100)
            + "\n#[cfg(test)]" + planted_fn("fn planted_test_only()", 103)
            + "// }\n" * 600
        )
        target = copy / rel
        target.write_text(target.read_text() + planted)
        found = check(offenders(copy), baseline)
    path = rel.as_posix()
    want = {f"new: fn {path} planted_long: 103 lines", f"new: file {path}"}
    caught = [p for p in found if any(p.startswith(w) for w in want)]
    wrong = [p for p in found if "planted_test_only" in p or "planted_at_the_limit" in p]
    ok = not clean and len(caught) == 2 and not wrong
    print("code_shape selftest: the unmodified copy", "passes" if not clean else "FAILS: " + "; ".join(clean))
    print("code_shape selftest: a planted 103-line function and a planted long file:",
          "; ".join(caught) if len(caught) == 2 else "NOT caught (" + "; ".join(found) + ")")
    print("code_shape selftest: a 100-line function and a #[cfg(test)] one:",
          "not counted" if not wrong else "COUNTED: " + "; ".join(wrong))
    return 0 if ok else 1


def main() -> int:
    if "--selftest" in sys.argv:
        return selftest()
    found = offenders(ROOT)
    if "--list" in sys.argv:
        for key, n in sorted(found.items()):
            print(key, n)
        return 0
    problems = check(found, read_baseline())
    for p in problems:
        print("code_shape:", p)
    print(f"code_shape: {len(found)} offender(s), all in the baseline" if not problems
          else f"code_shape: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
