#!/usr/bin/env python3
"""User pages say what a user needs, and nothing about the machine a figure came from.

    python3 scripts/user_docs_check.py [--selftest]

Checks the user pages (README.md, CHANGELOG.md, docs/*.md but not docs/dev/, config/, helm/) for
what belongs in development notes (docs/dev/) or commit messages: load averages, `nice`, a machine
shared with other work, paths of a particular machine, dates, commit hashes, issue numbers, and
notes about builds that were never released — in a changelog with no released version, any
section of changes or upgrade notes (there is nothing yet to change from or upgrade from). Where a figure was measured is said as "2 cores" at most.
Prints file:line: rule: text for each finding and exits 1 if there is one. Run by scripts/test.sh.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MONTHS = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)

# (rule, pattern): case-insensitive unless the pattern says otherwise; word boundaries keep
# "nice" in "ionice"-free prose like "finicky" or "device" from matching.
RULES = [
    ("load average", r"\bload[- ]averages?\b|\bloadavg\b"),
    ("nice", r"\b(?:re|io)?nice\b"),
    (
        "machine sharing",
        r"\bshared with other\s+(?:builds?|work|jobs|processes|sessions|tests|engineers?|users)\b"
        r"|\b(?:shared|busy|loaded|quiet|idle)\s+(?:\d+-core\s+)?(?:machines?|cores|hosts?)\b"
        r"|\bother builds?\b|\bnothing else (?:running|ran|was running)\b|\bat low priority\b",
    ),
    (
        "the machine a figure came from",
        r"\b\d+-core machines?\b|\b(?:this|the same|one)\s+machine\b(?!\s+words?)",
    ),
    (
        "a path outside the repository",
        r"(?<![\w.$-])/(?:work|root|home|tmp)/|/\.mirror\b|\.cargo/registry\b|\.rustup/",
    ),
    ("a date", r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b|\b" + MONTHS + r"\s+(?:\d{1,2},?\s+)?(?:19|20)\d\d\b"),
    # A commit hash: 7 to 12 lower-case hex digits with a digit and a letter, or 40, standing
    # alone (not a longer hex string, not after 0x, = or :, not inside a word or a number).
    (
        "a commit hash",
        r"(?-i:(?<![\w=:.#/-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])(?:[0-9a-f]{7,12}|[0-9a-f]{40})(?![\w-]))",
    ),
    ("an issue number", r"\b(?:issues?|PR|pull request)\s*#?\d+\b|(?<![\w&/#])#\d+\b"),
    (
        "a build never released",
        r"\b(?:earlier|older|former|previous|prior)\s+(?:builds?|versions?|releases?|defaults?)\b"
        r"|\bupgrad\w*\s+from\s+(?:a|an|the)?\s*(?:builds?|versions?)\b"
        r"|\bwritten by (?:earlier|older|previous)\b",
    ),
]
COMPILED = [(rule, re.compile(pattern, re.IGNORECASE)) for rule, pattern in RULES]

TEXT_SUFFIXES = {".md", ".toml", ".yaml", ".yml", ".json", ".tpl", ".txt"}


def user_pages(root=ROOT):
    pages = [root / "README.md", root / "CHANGELOG.md"]
    pages += sorted((root / "docs").glob("*.md"))
    for folder in ("config", "helm"):
        pages += sorted(
            p for p in (root / folder).rglob("*") if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name == ".helmignore")
        )
    return [p for p in pages if p.exists()]


def findings_in(text):
    """(line number, rule, matched text) for each finding in `text`."""
    # Matched over the whole text with line breaks as spaces, so a phrase broken over two lines
    # is found too; reported at the line it starts on.
    flat = text.replace("\r", " ").replace("\n", " ")
    out = []
    for rule, pattern in COMPILED:
        for m in pattern.finditer(flat):
            out.append((text.count("\n", 0, m.start()) + 1, rule, " ".join(m.group(0).split())))
    return sorted(out)


RELEASED = re.compile(r"^## \[?v?\d+\.\d+\.\d+", re.MULTILINE)
CHANGE_SECTION = re.compile(r"^### (Changed|Fixed|Removed|Deprecated|Upgrade notes|Upgrading)\b.*$", re.MULTILINE | re.IGNORECASE)


def changelog_findings(text):
    """(line number, rule, heading) for each section of a changelog with no released version
    that describes changes from, or upgrades from, a build (none was released)."""
    if RELEASED.search(text):
        return []
    return [(text.count("\n", 0, m.start()) + 1, "a build never released", m.group(0))
            for m in CHANGE_SECTION.finditer(text)]


def selftest():
    bad = [
        ("Measured at load average ≈ 6.9", "load average"),
        ("nice -n 19 cargo test --test tiers", "nice"),
        ("Measured on 2 cores shared with other work", "machine sharing"),
        ("on the shared 2-core machine", "machine sharing"),
        ("12.6 min wall on 2 busy cores", "machine sharing"),
        ("Three runs on a 2-core machine", "the machine a figure came from"),
        ("so the crossover on this machine lies", "the machine a figure came from"),
        ("default `/work/.mirror/rustsec+advisory-db/repo`", "a path outside the repository"),
        ("AUDIT_LOCK=/tmp/old.lock scripts/audit.sh", "a path outside the repository"),
        ("see ~/.cargo/registry/src", "a path outside the repository"),
        ("passes (2026-11-28)", "a date"),
        ("measured in March 2026", "a date"),
        ("build `47678a4`: green", "a commit hash"),
        ("on 5f8b1c0 (FPR", "a commit hash"),
        ("fixed in issue 47", "an issue number"),
        ("see #47", "an issue number"),
        ("Manifests (written by earlier versions) are", "a build never released"),
        ("left `checkpoint.topic` at its former default", "a build never released"),
        ("upgrading from a build that writes the stamp", "a build never released"),
        ("the format: upgrading\nfrom a build that writes", "a build never released"),
    ]
    good = [
        "A key all of whose cells are shared with other live keys stays present",
        "Values shared with subcharts (when dedupd is a subchart).",
        "The device is finicky; ionic bonds; a niche use; Nicest",
        "about 22 minutes on 2 cores the first time, then cached in `~/.cache/dedupd`",
        "64 filters per machine word",
        "On a machine with many cores and a filter far larger",
        "key_sha256=6ab9f1eb8f7d3388 (2 bytes)",
        "error:0A000086:SSL routines",
        "`1700000000123` ms, 18446744073709551616, 2208499712 bytes, deadbeef",
        "/etc/dedupd/dedupd.toml and /etc/kafka/ca.pem; .cargo/audit.toml",
        "the [CHANGELOG](../CHANGELOG.md#unreleased); see (#first-start-and-the-input-position)",
        "an older pod still owning a slice during a rolling update",
        "0.0.0.0:9464, version 0.1.0, envelope versions 2 to 5",
        "Sizes: 0x1f2e3d4c5b, abcdefabcdef, 1234567",
    ]
    failures = 0
    for text, rule in bad:
        rules = [r for _, r, _ in findings_in(text)]
        if rule not in rules:
            print(f"selftest: not found: {rule!r} in {text!r} (found {rules})")
            failures += 1
    for text in good:
        found = findings_in(text)
        if found:
            print(f"selftest: false alarm in {text!r}: {found}")
            failures += 1
    unreleased = "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- a\n\n### Upgrade notes\n\n- b\n"
    released = unreleased + "\n## [0.1.0]\n\n### Added\n\n- c\n"
    changelogs = [(unreleased, 1), (unreleased.replace("Upgrade notes", "Changed"), 1), (released, 0),
                  (unreleased.replace("### Upgrade notes", "### Known limitations"), 0)]
    for text, want in changelogs:
        found = changelog_findings(text)
        if len(found) != want:
            print(f"selftest: changelog {text!r}: {len(found)} finding(s), expected {want}: {found}")
            failures += 1
    checks = len(bad) + len(good) + len(changelogs)
    print(f"user_docs_check selftest: {checks - failures} passed, {failures} failed")
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--selftest"]:
        return selftest()
    if argv[1:]:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    count = 0
    pages = user_pages()
    for page in pages:
        text = page.read_text(encoding="utf-8", errors="replace")
        found = findings_in(text)
        if page.name == "CHANGELOG.md":
            found += changelog_findings(text)
        for number, rule, match in sorted(found):
            print(f"{page.relative_to(ROOT)}:{number}: {rule}: {match}")
            count += 1
    if count:
        print(
            f"user_docs_check: {count} finding(s) in user pages; where a figure was measured is at most "
            '"2 cores"; measurement logs, dates, builds and machines go to docs/dev/ (CONTRIBUTING.md)'
        )
        return 1
    print(f"user_docs_check: {len(pages)} user pages clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
