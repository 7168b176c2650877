#!/usr/bin/env bash
# Does a regular (non-editable) install work? Builds emqlab's wheel from a copy of the work tree, installs it in
# a fresh venv outside the checkout, and from another folder runs `emqlab simulate --split` (must exit 0 and
# name double-placement) and `emqlab scripts` (must exit 0 and list the same script SHA1s as the checkout,
# moveToFinished included; without bullmq, `--bullmq` must print a pip install hint). Leaves nothing behind: the checkout is not built in, the temp folder is removed.
# Usage: scripts/check_wheel.sh [PYTHON]   (default: $PYTHON, else .venv/bin/python, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY="${1:-${PYTHON:-}}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
PY=$(command -v "$PY")
case "$PY" in /*) ;; *) PY="$ROOT/$PY" ;; esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/emqlab-wheel.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "check_wheel: FAIL: $*" >&2; exit 1; }
start=$SECONDS

# 1. The source: the work tree's files (tracked and untracked, not ignored), so that setuptools' build/ and
#    *.egg-info land in the temp folder, not in the checkout.
mkdir "$TMP/src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
  done | tar --null -T - -cf - | tar -xf - -C "$TMP/src"
else
  tar --exclude=./.venv --exclude=./build --exclude='*.egg-info' --exclude=__pycache__ -cf - . | tar -xf - -C "$TMP/src"
fi

# 2. The wheel (pip's cache serves the build requirements), then a fresh venv with it and its dependencies.
"$PY" -m pip wheel -q --no-deps -w "$TMP/dist" "$TMP/src" >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; fail "wheel build"; }
WHEEL=$(ls "$TMP"/dist/emqlab-*.whl)
nlua=$("$PY" -m zipfile -l "$WHEEL" | grep -c '^emqlab/lua/.*\.lua ' || true)
nsrc=$(find "$ROOT/lua" -name '*.lua' | wc -l)
[ "$nlua" -eq "$nsrc" ] || fail "$(basename "$WHEEL") holds $nlua .lua files, lua/ has $nsrc"
"$PY" -m venv "$TMP/venv"
"$TMP/venv/bin/python" -m pip install -q "$WHEEL" >"$TMP/install.log" 2>&1 || { cat "$TMP/install.log"; fail "pip install"; }

# 3. Run the installed console script from an unrelated folder, with nothing pointing back at the checkout.
mkdir "$TMP/elsewhere"
cd "$TMP/elsewhere"
unset PYTHONPATH EMQLAB_LUA_DIR
where=$("$TMP/venv/bin/python" -c 'import emqlab.registry as r; print(r.__file__); print(r.lua_dir())')
case "$where" in *"$ROOT"*) fail "the installed emqlab reads the checkout: $where" ;; esac

set +e
"$TMP/venv/bin/emqlab" simulate --split >"$TMP/simulate.out" 2>&1; rc=$?
set -e
[ "$rc" -eq 0 ] || { cat "$TMP/simulate.out"; fail "emqlab simulate --split exited $rc"; }
grep -q 'double-placement' "$TMP/simulate.out" || { cat "$TMP/simulate.out"; fail "simulate --split names no double-placement"; }

set +e
"$TMP/venv/bin/emqlab" scripts >"$TMP/scripts.out" 2>&1; rc=$?
set -e
[ "$rc" -eq 0 ] || { cat "$TMP/scripts.out"; fail "emqlab scripts exited $rc"; }
(cd "$ROOT" && env -u EMQLAB_LUA_DIR "$PY" -m emqlab.ui.cli scripts) >"$TMP/scripts.checkout" 2>&1 \
  || { cat "$TMP/scripts.checkout"; fail "the checkout's emqlab scripts failed"; }
shas() { awk '$3 ~ /^[0-9a-f]{40}$/ { print $1, $2, $3 }' "$1"; }
shas "$TMP/scripts.out" >"$TMP/shas.installed"
shas "$TMP/scripts.checkout" >"$TMP/shas.checkout"
grep -q '^moveToFinished ' "$TMP/shas.installed" || { cat "$TMP/scripts.out"; fail "emqlab scripts lists no moveToFinished"; }
diff -u "$TMP/shas.checkout" "$TMP/shas.installed" >&2 || fail "installed script SHA1s differ from the checkout's"

# Without the test extra, `emqlab scripts --bullmq` must tell a wheel user a command that works for them.
"$TMP/venv/bin/emqlab" scripts --bullmq >"$TMP/bullmq.out" 2>&1 && fail "emqlab scripts --bullmq ran without bullmq"
grep -q 'pip install bullmq==' "$TMP/bullmq.out" || { cat "$TMP/bullmq.out"; fail "scripts --bullmq gives no install hint"; }

echo "check_wheel: ok: $(basename "$WHEEL") ($nlua .lua files) installs and runs outside the checkout;" \
  "$(wc -l <"$TMP/shas.installed") script SHA1s match, $(grep '^moveToFinished ' "$TMP/shas.installed" | cut -d' ' -f1,3)" \
  "($((SECONDS - start))s)"
