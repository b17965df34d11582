#!/usr/bin/env bash
# The main job on a throwaway venv: install a real FlashInfer release, then check, dry-run,
# apply, apply again, check, revert, check. Each step shows its command and exit code, and the
# script stops if a code is not the documented one.
set -uo pipefail
venv=${1:-build/demo-venv}
release=${DEMO_FLASHINFER:-0.6.18.post1}

step() {
  local expected=$1; shift
  if [ -t 1 ]; then printf '\n\033[1m$ %s\033[0m\n' "$*"; else printf '\n$ %s\n' "$*"; fi
  "$@"
  local code=$?
  printf '(exit %s)\n' "$code"
  if [ "$code" != "$expected" ]; then
    echo "demo: expected exit $expected" >&2
    exit 1
  fi
}

rm -rf "$venv"
python3 -m venv --without-pip "$venv" || exit 1
echo "installing flashinfer-python==$release into $venv (no dependencies: fi-patch never imports it)"
python -m pip --python "$venv/bin/python" install -q --no-deps "flashinfer-python==$release" || exit 1

step 3 fi-patch check --venv "$venv"
step 0 fi-patch apply --venv "$venv" --dry-run
step 0 fi-patch apply --venv "$venv"
step 0 fi-patch apply --venv "$venv"
step 0 fi-patch check --venv "$venv"
step 0 fi-patch revert --venv "$venv"
step 3 fi-patch check --venv "$venv"
echo
echo "demo: done; $venv is yours to inspect (make clean removes it)"
