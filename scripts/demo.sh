#!/usr/bin/env bash
# The main job on a throwaway venv: a real FlashInfer release beside torch's CUDA 13.0 build
# (it imports without a GPU). FlashInfer 0.7.0 takes 20 of fi-patch's 21 patches (the FP4 path,
# the declared ops, API logging, and the op boundaries of the quantizers, activations, GEMMs and
# samplers). The proofs fail before, a dry run names what apply would change, apply runs its
# pre-flight and the proofs and says in a summary what it wrote, they pass after, then check,
# revert of one patch (the others stay), that patch again with its diff (--diff), and revert of
# all. Each step shows its command and exit code, and the script stops if a code is not the
# documented one.
set -uo pipefail
venv=${1:-build/demo-venv}
release=${DEMO_FLASHINFER:-0.7.0}
torch=${DEMO_TORCH:-2.14.1}

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
# pip runs from fi-patch's own venv (make puts it first on PATH); the demo venv, like one made
# by uv, has no pip of its own. -qq: errors only.
pip_target() {
  python -m pip --python "$venv/bin/python" install -qq --disable-pip-version-check "$@" || exit 1
}
echo "installing torch==$torch (CUDA build) and what 'import flashinfer' needs into $venv (about a minute)"
pip_target "torch==$torch" "apache-tvm-ffi<0.2" numpy packaging requests nvidia-ml-py tqdm \
  click einops ninja tabulate filelock
echo "installing flashinfer-python==$release (its GPU-only dependencies left out)"
pip_target --no-deps "flashinfer-python==$release"

step 3 fi-patch check --venv "$venv" --verify
# -q: the dry run names what it would apply (without -q it shows the diff).
step 0 fi-patch apply --venv "$venv" --dry-run -q
# The summary: a line for each file, the proofs in one, where the backups are.
step 0 fi-patch apply --venv "$venv"
step 0 fi-patch apply --venv "$venv"
step 0 fi-patch check --venv "$venv" --verify
step 0 fi-patch revert --venv "$venv" --patch fp4-quantize-under-compile
step 3 fi-patch check --venv "$venv"
# The same patch again, with its diff.
step 0 fi-patch apply --venv "$venv" --patch fp4-quantize-under-compile --diff
step 0 fi-patch revert --venv "$venv"
step 3 fi-patch check --venv "$venv"
echo
echo "demo: done; $venv is yours to inspect (make clean removes it)"
