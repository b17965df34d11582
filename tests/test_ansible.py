"""examples/ansible/playbook.yml, run by ansible-core against localhost on a real venv."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MakeVenv
from tests.support.expected import expected
from tests.support.releases import FP4
from tests.support.tool import ROOT, build_wheel
from tests.support.venvs import fp4_file, replace_bytes, target_file

PLAYBOOK = ROOT / "examples" / "ansible" / "playbook.yml"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def playbook(venv: Path, tool: Path, wheel: Path) -> tuple[int, str]:
    completed = subprocess.run(
        [
            Path(sys.executable).parent / "ansible-playbook",
            "-i",
            "localhost,",
            "-c",
            "local",
            PLAYBOOK,
            "-e",
            f"target_venv={venv}",
            "-e",
            f"fi_patch_home={tool}",
            "-e",
            f"fi_patch_package={wheel}",
            "-e",
            f"fi_patch_python={sys.executable}",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tool.parent)},
        check=False,
    )
    return completed.returncode, completed.stdout + completed.stderr


def recap(output: str) -> dict[str, int]:
    line = next(x for x in output.splitlines() if x.startswith("localhost") and "ok=" in x)
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)}


def test_playbook_changed_then_ok_then_fails_on_drift(
    venv_with: MakeVenv, wheel: Path, tmp_path: Path
) -> None:
    venv = venv_with("0.7.4")
    tool = tmp_path / "fi-patch-home"

    code, output = playbook(venv, tool, wheel)
    assert code == 0, output
    assert recap(output)["changed"] == 2  # fi-patch installed, FlashInfer patched
    assert "cuda-version-torch-first applied, " in output
    assert "fp4-quantize-under-compile applied (" in output
    assert target_file(venv).read_bytes() == expected("0.7.4").encode()
    assert fp4_file(venv).read_bytes() == expected("0.7.4", FP4).encode()

    code, output = playbook(venv, tool, wheel)
    assert code == 0, output
    assert recap(output)["changed"] == 0 and recap(output)["failed"] == 0
    assert "cuda-version-torch-first already-applied, " in output

    replace_bytes(target_file(venv), target_file(venv).read_bytes() + b"# edited by hand\n")
    code, output = playbook(venv, tool, wheel)
    assert code != 0
    assert recap(output)["failed"] == 1
    assert "fi-patch exit 7: refusing to patch" in " ".join(output.split())
