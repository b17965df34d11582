"""scripts/gpu/, the GPU checks CI never runs: without a device each says so."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import MakeVenv
from tests.support.tool import ROOT
from tests.support.venvs import python_of


@pytest.mark.parametrize("script", ["fp4_compiled.py", "declared_ops.py", "boundaries.py"])
def test_without_a_gpu_it_says_so_and_exits_77(venv_with: MakeVenv, script: str) -> None:
    """CUDA_VISIBLE_DEVICES="" hides any device, so this holds on a GPU machine too."""
    venv = venv_with("0.7.4")
    completed = subprocess.run(
        [python_of(venv), ROOT / "scripts" / "gpu" / script],
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        check=False,
    )
    assert completed.returncode == 77, completed.stderr
    assert completed.stdout.startswith("no CUDA device (torch 2.14.1+cu130): nothing checked")
