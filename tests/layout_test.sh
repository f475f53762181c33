#!/usr/bin/env bash
# The layout's two rules (docs/design.md, "Layers"), checked on the repository's tracked files:
#  1. Includes point down: common < kernels < collective/transport < collective < fusion <
#     bindings. A library file includes headers of its own layer or of layers below, never
#     above, and never the tests'.
#  2. No library file is over 500 lines.
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
if [ "$failed" -eq 0 ]; then
  echo "layout: ${#library[@]} library files, every include points down, none over 500 lines"
fi
exit "$failed"
