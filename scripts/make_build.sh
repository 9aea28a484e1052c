#!/usr/bin/env bash
# One build of SGLang for the A/B patch gate (docs/ci.md): a venv at DEST with SGLang installed editable from a
# worktree of SRC at its HEAD, with PATCH files applied. Editable, so the build's identity in every report carries
# the worktree's commit and dirty state; the patch files' hash joins it through [build.NAME] patches.
#   bash scripts/make_build.sh DEST SRC [PATCH ...]
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/make_build.sh DEST SRC [PATCH ...]" >&2
  exit 2
fi
dest=$1
src=$2
shift 2
patches=()
for p in "$@"; do
  [ -f "$p" ] || { echo "make_build: no patch file $p" >&2; exit 2; }
  patches+=("$(realpath "$p")")
done
work="$dest-src"
git -C "$src" worktree remove --force "$work" 2>/dev/null || rm -rf "$work"
git -C "$src" worktree add --detach "$work" HEAD
for p in "${patches[@]}"; do
  git -C "$work" apply "$p"
done
python3 -m venv --clear "$dest"
"$dest/bin/pip" install -q -e "$work/python"
echo "make_build: $dest ($("$dest/bin/python" -c 'import sglang; print(sglang.__version__)'), ${#patches[@]} patches)"
