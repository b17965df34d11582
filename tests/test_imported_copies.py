"""Copies a normal start would import instead: fi-patch probes with -I, so it also asks a normal
start of the same interpreter, in its own environment, where FlashInfer comes from.

Real: a `pip install --target` folder on PYTHONPATH (and, in test_shared_base.py, a
`pip install --user` copy) holding another FlashInfer release.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch
from tests.support.expected import expected
from tests.support.releases import RELEASES, released_text
from tests.support.venvs import target_file


def test_a_pythonpath_copy_a_normal_start_imports_is_named(
    venv_with: MakeVenv, pythonpath_copy: Path
) -> None:
    venv = venv_with("0.7.4")
    folder = pythonpath_copy
    shadowed = CliRunner(env={"PYTHONPATH": str(folder), "VIRTUAL_ENV": None, "NO_COLOR": "1"})
    check = fi_patch(shadowed, "check", "--venv", venv, "--json")
    assert check.code == ExitCode.LAYOUT, check.stdout
    (result,) = check.json["results"]
    assert result["imported_instead"] == {"path": str(folder / "flashinfer"), "via": "PYTHONPATH"}
    assert all(p["state"] in ("pristine", "not-applicable") for p in result["patches"])

    # apply refuses as check said it would: a server started like fi-patch would not run the
    # patches (check || apply would otherwise apply, and check say 8 again, for ever).
    refused = fi_patch(shadowed, "apply", "--venv", venv, "--no-verify")
    assert refused.code == ExitCode.LAYOUT
    assert f"imports {folder / 'flashinfer'} (found through PYTHONPATH)" in refused.text
    assert "would not run fi-patch's patches" in refused.text
    assert result["refusal"]["message"] in refused.text
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.4"])

    plain = CliRunner(env={"VIRTUAL_ENV": None, "NO_COLOR": "1"})
    assert fi_patch(plain, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert target_file(venv).read_bytes() == expected("0.7.4").encode()
    copy = folder / "flashinfer" / "jit" / "cpp_ext.py"
    assert copy.read_bytes() == released_text(RELEASES["0.5.0"])
    # Patched or not, the copy a server would import is not fi-patch's: check never says 0.
    assert fi_patch(shadowed, "check", "--venv", venv).code == ExitCode.LAYOUT
    assert fi_patch(shadowed, "apply", "--venv", venv).code == ExitCode.LAYOUT
    assert fi_patch(plain, "check", "--venv", venv).code == ExitCode.OK
