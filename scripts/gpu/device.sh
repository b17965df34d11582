#!/usr/bin/env bash
# `make gpu-check` on a GPU machine that reaches no package index, for several FlashInfer releases
# side by side, in one timed run:
#
#     scripts/gpu/device.sh WHEELS OUT RELEASE...
#
# WHEELS holds fi-patch's wheel and those of its dependencies the machine lacks (libcst, typer:
# every wheel there but apache-tvm-ffi's goes into fi-patch's venv), apache-tvm-ffi's, and
# fi-stored.tar.xz: the FlashInfer wheels, stored uncompressed inside one xz tar (the releases
# share most of their files; 0.7.4's wheel alone is 101 MB, three in one are 33 MB). The machine's
# python3 must hold torch with CUDA. For each release, at once: a venv that sees python3's
# packages (the machine's torch) and holds FlashInfer; `fi-patch check`, `apply`, `check`;
# the three GPU scripts, each split into parts (--part) run side by side, since each process
# builds FlashInfer's JIT kernels as its cases first call them; then `revert` and `check`.
# Everything printed goes to OUT/gpu-check.log, release by release; the JSON of every part to
# OUT/results.tar.gz. The scripts stop at FI_GPU_SECONDS (default 420) after the start: what a
# stopped part saw is in the log, one line per case as it ended. Exit status: 0 every release got
# its venv and ran (the verdicts are in the log), 1 one did not, 2 no fi-patch or no wheels.
#
# FI_GPU_PARTS names the scripts and how many parts each runs in (default "fp4_compiled:1
# declared_ops:3 boundaries:5"). FI_GPU_PTH, if set, is the folder each venv sees instead of
# python3's packages: a dry run on a machine whose python3 has no torch (the scripts then exit 77,
# "no CUDA device").
set -uo pipefail
if [ $# -lt 3 ]; then
    echo "usage: scripts/gpu/device.sh WHEELS OUT RELEASE..." >&2
    exit 2
fi
wheels=$(realpath "$1")
out=$(realpath "$2")
shift 2
here=$(cd "$(dirname "$0")" && pwd)
work=${FI_GPU_WORK:-/tmp/fi-gpu}
seconds=${FI_GPU_SECONDS:-420}
# shellcheck disable=SC2206 # one script:parts a word
parts_of=(${FI_GPU_PARTS:-fp4_compiled:1 declared_ops:3 boundaries:5})

say() { echo "[$SECONDS s] $*"; }
step() {
    "$tool" "${@:2}" >"$1.log" 2>&1
    echo "exit $? after ${SECONDS}s" >>"$1.log"
}
install() { "$1/bin/python" -m pip install -q --no-index --no-deps --no-compile "${@:2}"; }
# python3's own packages (torch among them), through a .pth: where python3 is itself a venv's
# (/opt/torch/.venv on the lent machines), --system-site-packages reaches only its base's.
packages=${FI_GPU_PTH:-$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')}
venv() {
    local purelib
    python3 -m venv "$1" || return
    purelib=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))') || return
    echo "$packages" >"$purelib/_fi_gpu.pth"
}

release() {
    local rel=$1 venv_=$work/venv-$rel logs=$work/logs/$rel
    mkdir -p "$logs"
    venv "$venv_" && install "$venv_" "$wheels"/apache_tvm_ffi-*.whl "$work"/wheels/flashinfer_python-"$rel"-*.whl || {
        say "$rel: no venv"
        return 1
    }
    step "$logs/0a-check-before" check --venv "$venv_"
    step "$logs/0b-apply" apply --venv "$venv_"
    step "$logs/0c-check-after" check --venv "$venv_"
    local left=$((seconds - SECONDS)) spec script n k
    ((left > 0)) || left=1 # timeout 0 would mean no limit
    say "$rel: applied; the scripts have ${left}s"
    for spec in "${parts_of[@]}"; do
        script=${spec%%:*} n=${spec##*:}
        for ((k = 0; k < n; k++)); do
            # Its exit status last: 124 is a part stopped at the time limit.
            (
                PYTHONUNBUFFERED=1 timeout "$left" "$venv_/bin/python" "$here/$script.py" \
                    --part "$k/$n" --out "$logs/$script-$k.json"
                echo "exit $? after ${SECONDS}s"
            ) >"$logs/1-$script-$k.log" 2>&1 &
        done
    done
    wait
    step "$logs/2a-revert" revert --venv "$venv_"
    step "$logs/2b-check-reverted" check --venv "$venv_"
    say "$rel: done"
}

# FI_GPU_WORK is emptied first: only a new or empty folder, or one an earlier run made.
if [ -d "$work" ] && [ ! -d "$work/tool" ] && [ -n "$(ls -A "$work")" ]; then
    echo "FI_GPU_WORK holds files this script did not make; not emptying it: $work" >&2
    exit 2
fi
rm -rf "$work" && mkdir -p "$work/wheels" "$work/logs" "$out" || exit 2
say "tool"
tool_wheels=$(ls "$wheels"/*.whl | grep -v /apache_tvm_ffi-)
# shellcheck disable=SC2086 # one wheel a word
venv "$work/tool" && install "$work/tool" $tool_wheels || exit 2
tool=$work/tool/bin/fi-patch
say "FlashInfer's wheels"
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], filter="data")' \
    "$wheels/fi-stored.tar.xz" "$work/wheels" || exit 2
export FLASHINFER_WORKSPACE_BASE=$work/jit
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1
else
    echo "no nvidia-smi here"
fi
pids=()
for rel in "$@"; do
    release "$rel" &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
say "all done"
{
    for rel in "$@"; do
        for file in "$work/logs/$rel"/*.log; do
            [ -e "$file" ] || continue
            echo "===== $rel ${file##*/}"
            # FlashInfer's JIT build lines, and pip's, are noise here; the rest is kept.
            grep -v -e '^\[[0-9]*/[0-9]*\] ' -e '^ninja: ' "$file"
        done
    done
} >"$out/gpu-check.log"
tar -czf "$out/results.tar.gz" -C "$work/logs" .
exit $status
