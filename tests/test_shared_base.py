"""A venv made with --system-site-packages shares its base interpreter's packages: fi-patch
never writes the base's files from the venv, and names the command that patches them there.

Real: a base interpreter of this test's own (the CPython the tests run on, copied, with an
empty site-packages), FlashInfer installed into it by pip, and a venv made from it with
`--system-site-packages`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.support.cli import fi_patch, patch_result
from tests.support.deps import CUDA_TORCH, shared, use
from tests.support.expected import expected
from tests.support.releases import RELEASES, TARGET, fetch, released_text
from tests.support.tiers import SLOW
from tests.support.venvs import install, python_of, site_packages, target_file

MACHINE_PYTHON = Path(sys.base_prefix)
"""The installation the tests' own interpreter comes from, copied as the base."""
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A base interpreter of the test's own, holding FlashInfer 0.5.0 (and the shared torch)."""
    root = tmp_path / "base"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / PY).write_bytes((MACHINE_PYTHON / "bin" / PY).read_bytes())
    (root / "bin" / PY).chmod(0o755)
    for name in ("python3", "python"):
        (root / "bin" / name).symlink_to(PY)
    stdlib = MACHINE_PYTHON / "lib" / PY

    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        skipped = (f"{PY}/site-packages", f"{PY}/test")
        return None if member.name.startswith(skipped) or "__pycache__" in member.name else member

    archive = tmp_path / "stdlib.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(stdlib, arcname=PY, filter=keep)
    with tarfile.open(archive) as tar:
        tar.extractall(root / "lib", filter="data")
    (root / "lib" / PY / "site-packages").mkdir()
    install(root, RELEASES["0.5.0"])
    use(root, shared(CUDA_TORCH))
    return root


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sharing(base: Path, tmp_path: Path) -> Path:
    venv = tmp_path / "shares-the-base"
    subprocess.run(
        [
            base / "bin" / PY,
            "-m",
            "venv",
            "--without-pip",
            "--system-site-packages",
            venv,
        ],
        check=True,
    )
    return venv


def test_the_base_copy_is_patched_only_through_the_base(
    runner: CliRunner, base: Path, tmp_path: Path
) -> None:
    venv = sharing(base, tmp_path)
    base_file = site_packages(base) / TARGET
    base_python = base / "bin" / PY
    original = sha256(base_file)

    check = fi_patch(runner, "check", "--venv", venv, "--json")
    # check says what apply would do here: refuse (8), as apply does below.
    assert check.code == ExitCode.LAYOUT
    assert patch_result(check.json)["file"] == str(base_file)
    (result,) = check.json["results"]
    assert any(f"fi-patch apply --python {base_python}" in w for w in result["warnings"])

    refused = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert refused.code == ExitCode.LAYOUT
    said = refused.text
    assert (
        f"is installed in {site_packages(base)}, which belongs to the interpreter {base_python}"
        in said
    )
    assert f"fi-patch apply --python {base_python}" in said
    assert sha256(base_file) == original
    assert not (venv / ".fi-patch").exists() and not (base / ".fi-patch").exists()

    there = fi_patch(runner, "apply", "--python", base_python, "--no-verify")
    assert there.code == ExitCode.OK, there.text
    assert base_file.read_bytes() == expected("0.5.0").encode()
    assert (base / ".fi-patch" / "manifest.json").exists()

    # From the venv, the base's records say what the shared file is.
    check = fi_patch(runner, "check", "--venv", venv, "--json")
    assert (check.code, patch_result(check.json)["state"]) == (ExitCode.OK, "patched")
    again = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert again.code == ExitCode.OK
    assert patch_result(again.json)["action"] == "already-applied"
    # revert, as apply, names where the records are and how to work there.
    shared_revert = fi_patch(runner, "revert", "--venv", venv)
    assert shared_revert.code == ExitCode.LAYOUT, shared_revert.text
    assert f"which belongs to the interpreter {base_python}" in shared_revert.text
    assert f"fi-patch revert --python {base_python}" in shared_revert.text
    assert base_file.read_bytes() == expected("0.5.0").encode()

    assert fi_patch(runner, "revert", "--python", base_python).code == ExitCode.OK
    assert sha256(base_file) == original


@SLOW
def test_with_a_copy_in_both_the_one_imported_first_is_patched(
    runner: CliRunner, base: Path, tmp_path: Path
) -> None:
    venv = sharing(base, tmp_path)
    install(venv, RELEASES["0.7.4"])
    use(venv, shared(CUDA_TORCH))
    base_file = site_packages(base) / TARGET
    original = sha256(base_file)
    imported = subprocess.run(
        [python_of(venv), "-c", "import flashinfer.jit.cpp_ext as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert imported == str(target_file(venv))

    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert run.code == ExitCode.OK, run.stdout
    assert patch_result(run.json)["file"] == str(target_file(venv))
    (result,) = run.json["results"]
    assert any(
        "flashinfer_python-0.5.0.dist-info" in w and "is not imported" in w
        for w in result["warnings"]
    )
    assert target_file(venv).read_bytes() == expected("0.7.4").encode()
    assert sha256(base_file) == original
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.4"])


@SLOW
def test_a_user_site_copy_a_normal_start_imports_is_named(base: Path, tmp_path: Path) -> None:
    """A base interpreter (not a venv) imports from the user's site-packages first: a copy
    there, put by `pip install --user`, is the one a server started by that user runs."""
    user_base = tmp_path / "user-base"
    environ = {**os.environ, "PYTHONUSERBASE": str(user_base), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            base / "bin" / PY,
            "install",
            "-q",
            "--user",
            "--no-deps",
            "--no-index",
            fetch(RELEASES["0.7.4"]),
        ],
        check=True,
        env=environ,
    )
    runner = CliRunner(env={"PYTHONUSERBASE": str(user_base), "VIRTUAL_ENV": None})
    check = fi_patch(runner, "check", "--python", base / "bin" / PY, "--json")
    assert check.code == ExitCode.LAYOUT, check.stdout
    (result,) = check.json["results"]
    instead = result["imported_instead"]
    assert instead["via"] == "the user's site-packages"
    assert instead["path"].startswith(str(user_base))
    assert patch_result(check.json)["file"] == str(site_packages(base) / TARGET)
