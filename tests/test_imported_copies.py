"""Copies a normal start would import instead: fi-patch probes with -I, so it also asks a normal
start of the same interpreter, in its own environment, where FlashInfer comes from.

Real: a `pip install --target` folder on PYTHONPATH (and, in test_shared_base.py, a
`pip install --user` copy) holding another FlashInfer release.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch
from tests.support.expected import expected
from tests.support.releases import RELEASES, fetch, released_text
from tests.support.venvs import target_file


def test_a_pythonpath_copy_a_normal_start_imports_is_named(
    venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.4")
    folder = tmp_path / "pythonpath"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            folder,
            fetch(RELEASES["0.5.0"]),
        ],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    shadowed = CliRunner(env={"PYTHONPATH": str(folder), "VIRTUAL_ENV": None, "NO_COLOR": "1"})
    check = fi_patch(shadowed, "check", "--venv", venv, "--json")
    assert check.code == ExitCode.LAYOUT, check.stdout
    (result,) = check.json["results"]
    assert result["imported_instead"] == {"path": str(folder / "flashinfer"), "via": "PYTHONPATH"}
    assert all(p["state"] in ("pristine", "not-applicable") for p in result["patches"])

    applied = fi_patch(shadowed, "apply", "--venv", venv, "--no-verify")
    assert applied.code == ExitCode.OK
    assert f"imports {folder / 'flashinfer'} (found through PYTHONPATH)" in applied.text
    assert "does not run fi-patch's patches" in applied.text
    assert target_file(venv).read_bytes() == expected("0.7.4").encode()
    copy = folder / "flashinfer" / "jit" / "cpp_ext.py"
    assert copy.read_bytes() == released_text(RELEASES["0.5.0"])
    # Patched or not, the copy a server would import is not fi-patch's: check never says 0.
    assert fi_patch(shadowed, "check", "--venv", venv).code == ExitCode.LAYOUT

    plain = CliRunner(env={"VIRTUAL_ENV": None, "NO_COLOR": "1"})
    assert fi_patch(plain, "check", "--venv", venv).code == ExitCode.OK
