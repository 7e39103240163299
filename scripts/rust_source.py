"""Reading Rust source without a Rust parser: what scripts/import_cycles.py and
scripts/code_shape.py share.

`blank(text)` keeps every character's position and line but blanks comments, string, byte-string,
raw-string and char literals (their insides become spaces), so braces, `fn` and paths can be
matched with regular expressions and brace counting without a `{` in a string or a `}` in a
comment throwing the count off. Lifetimes (`'a`) are code, not char literals.

`cfg_test_spans(code)` finds the items behind `#[cfg(test)]` (a `mod … { … }`, a `mod …;`, a
`use …;`, a `fn … { … }`) in blanked code, as (start, end) offsets.
"""
import re


def blank(text: str) -> str:
    out = list(text)
    n = len(text)
    i = 0

    def erase(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            end = text.find("\n", i)
            end = n if end < 0 else end
            erase(i, end)
            i = end
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            erase(i, j)
            i = j
        elif c in "rb" and not _ident_before(text, i):
            m = re.match(r'(?:br|rb|r)(#*)"', text[i : i + 300])
            if m:
                close = '"' + m.group(1)
                end = text.find(close, i + m.end())
                end = n if end < 0 else end + len(close)
                erase(i + m.end(), end - len(close))
                i = end
            elif text.startswith('b"', i):
                i = _string(text, i + 1, erase)
            elif text.startswith("b'", i):
                i = _char(text, i + 1, erase) or i + 2
            else:
                i += 1
        elif c == '"':
            i = _string(text, i, erase)
        elif c == "'":
            i = _char(text, i, erase) or i + 1  # a lifetime or a label: code
        else:
            i += 1
    return "".join(out)


def _ident_before(text: str, i: int) -> bool:
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


def _string(text: str, i: int, erase) -> int:
    """`i` at the opening quote; returns the offset after the closing one."""
    j = i + 1
    while j < len(text) and text[j] != '"':
        j += 2 if text[j] == "\\" else 1
    erase(i + 1, j)
    return j + 1


def _char(text: str, i: int, erase):
    """`i` at a quote: a char literal's end, or None when it is a lifetime or label."""
    if i + 1 < len(text) and text[i + 1] == "\\":
        end = text.find("'", i + 2)
        if end < 0:
            return None
        erase(i + 1, end)
        return end + 1
    if i + 2 < len(text) and text[i + 2] == "'":
        erase(i + 1, i + 2)
        return i + 3
    return None


def matching_brace(code: str, open_at: int) -> int:
    """The offset of the `}` closing the `{` at `open_at` in blanked code (or the end)."""
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code) - 1


CFG_TEST = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*")


def cfg_test_spans(code: str) -> list[tuple[int, int]]:
    spans = []
    for m in CFG_TEST.finditer(code):
        j = m.end()
        semi = code.find(";", j)
        brace = code.find("{", j)
        if brace >= 0 and (semi < 0 or brace < semi):
            spans.append((m.start(), matching_brace(code, brace) + 1))
        elif semi >= 0:
            spans.append((m.start(), semi + 1))
    return spans


def without(code: str, spans) -> str:
    out = list(code)
    for a, b in spans:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out)
