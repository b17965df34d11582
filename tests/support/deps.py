"""One shared torch installation for all test venvs, added to each through a .pth file.

Installed once with `pip install --target` into the test cache (the wheels lie on this machine's
disk; a fresh machine takes about a minute for the CUDA build) and reused by every test venv and
later run, instead of 5.5 GB per venv.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.releases import CACHE, cache_lock
from tests.support.venvs import site_packages

# torch 2.14.1 is the CUDA 13.0 build: it imports without a GPU and reports torch.version.cuda
# "13.0", matching this machine's nvcc. The rest is what `import flashinfer` and its FP4 module
# `flashinfer.quantization.fp4_quantization` need on a CPU: FlashInfer's own requirements less
# the CUDA-only ones (cuda-python, the cutlass DSL, cuDNN's frontend, NCCL), found by importing
# 0.6.18 and 0.7.4 with `--no-deps` and adding what each import asked for.
CUDA_TORCH = (
    "torch==2.14.1",
    "apache-tvm-ffi<0.2",
    "numpy",
    "packaging",
    "requests",
    "nvidia-ml-py",
    "tqdm",
    "click",
    "einops",
    "ninja",
    "tabulate",
    "filelock",
)
CPU_TORCH = ("torch==2.13.0", *CUDA_TORCH[1:])
"""torch's CPU build, with what FlashInfer imports: its proofs run on it too."""
OLDEST_TORCH = ("torch==2.8.0", *CUDA_TORCH[1:])
"""The oldest torch the patches that make ops accept (custom_op's tags: the stride contract and
cudagraph_unsafe), a CUDA 12.8 build with the NVIDIA libraries it loads at import (about 3.5 GB):
the slow tier proves compiled equals eager on it."""
PTH = "_fi_patch_test_torch.pth"


def shared(requirements: tuple[str, ...]) -> Path:
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    folder = CACHE / "deps" / f"{requirements[0].replace('==', '-')}-{key}"
    with cache_lock(f"deps-{folder.name}"):
        if not (folder / ".complete").exists():
            _install(requirements, folder)
    return folder


def _install(requirements: tuple[str, ...], folder: Path) -> None:
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", partial, *requirements],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    (partial / ".complete").write_text("\n".join(requirements) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def use(venv: Path, folder: Path | None) -> None:
    """Make `folder` the venv's torch (None: no torch at all). Replaces, never edits, the .pth."""
    pth = site_packages(venv) / PTH
    pth.unlink(missing_ok=True)
    if folder is not None:
        pth.write_text(f"{folder}\n")


def fake_torch(folder: Path, init: str, version: str = "2.14.1+cu130", cuda: str = "13.0") -> Path:
    """A torch whose version file reads fine (CUDA 13.0 by default) and whose import runs
    `init`: a broken upgrade, a hung import, an old release or another build, as the pre-flight
    and the proofs meet them."""
    package = folder / "torch"
    package.mkdir(parents=True)
    (package / "version.py").write_text(f"__version__ = '{version}'\ncuda = '{cuda}'\n")
    (package / "__init__.py").write_text(init)
    return folder
