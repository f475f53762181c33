#!/usr/bin/env bash
# The layout's two rules (docs/design.md, "Layers"), checked on the repository's tracked files:
#  1. Includes point down: common < kernels < collective/transport < collective < fusion <
#     bindings. A library file includes headers of its own layer or of layers below, never
#     above, and never the tests'.
#  2. No library file is over 500 lines.
#  3. Every comment that cites docs/design.md names one of its sections.
# Prints every violation and exits 1 if there is one.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

rank() {
  case "$1" in
    common/*) echo 0 ;;
    kernels/*) echo 1 ;;
    collective/transport/*) echo 2 ;;
    collective/*) echo 3 ;;
    fusion/*) echo 4 ;;
    bindings/*) echo 5 ;;
    tests/*) echo 9 ;;
    *) echo -1 ;;
  esac
}

failed=0
mapfile -t library < <(git ls-files 'common/*' 'kernels/*' 'collective/*' 'fusion/*' 'bindings/*' |
  grep -E '\.(h|cc|cu|cuh|py|in)$')
for file in "${library[@]}"; do
  mine=$(rank "$file")
  while IFS= read -r header; do
    theirs=$(rank "$header")
    if [ "$theirs" -lt 0 ]; then continue; fi  # system, generated (common/config.h) or bindings' own
    if [ "$theirs" -gt "$mine" ]; then
      echo "upward include: $file includes $header"
      failed=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
  lines=$(wc -l <"$file")
  if [ "$lines" -gt 500 ]; then
    echo "too long: $file has $lines lines (at most 500)"
    failed=1
  fi
done
# Citations such as: docs/design.md, "One schedule" (wrapped over comment lines at times).
citations=$(git ls-files | grep -vE '^docs/|\.md$' | /usr/bin/python3 -c '
import re, sys
sections = {l.lstrip("#").strip() for l in open("docs/design.md") if re.match(r"#{2,3} ", l)}
cited, bad = set(), []
for path in sys.stdin.read().split():
    try:
        text = open(path, encoding="utf-8").read()
    except (UnicodeDecodeError, IsADirectoryError):
        continue
    for m in re.finditer(r"docs/design\.md,\s*\"([^\"]*)\"", text):
        name = " ".join(w for w in m.group(1).split() if w not in ("//", "#", "*"))
        cited.add(name)
        if name not in sections:
            bad.append(f"{path}: a citation of docs/design.md names no section of it: \"{name}\"")
print("\n".join(bad + [str(len(cited))]))
')
count=$(tail -n 1 <<<"$citations")
if [ "$(wc -l <<<"$citations")" -gt 1 ]; then
  head -n -1 <<<"$citations"
  failed=1
fi
if [ "$failed" -eq 0 ]; then
  echo "layout: ${#library[@]} library files, every include points down, none over 500 lines;" \
    "$count sections of docs/design.md cited, all of them there"
fi
exit "$failed"
