"""The real, installed `fi-patch`: a non-editable wheel in a fresh venv, run as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fi_patcher import __version__
from fi_patcher.errors import ExitCode
from fi_patcher.registry import load_patches
from tests.conftest import MakeVenv
from tests.support.cli import patch_result
from tests.support.expected import expected
from tests.support.releases import BOUNDARIES, cache_lock
from tests.support.tiers import SLOW
from tests.support.tool import ROOT, build_wheel
from tests.support.venvs import target_file


@pytest.fixture(scope="module")
def installed_tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with fi-patch installed from its wheel, as `pipx install .` would do."""
    folder = tmp_path_factory.mktemp("tool")
    wheel = build_wheel(folder / "wheels")
    tool = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", tool], check=True)
    subprocess.run([tool / "bin" / "python", "-m", "pip", "install", "-q", wheel], check=True)
    return tool


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, cwd=cwd, check=False
    )


def test_wheel_ships_the_patches_and_runs(installed_tool: Path, tmp_path: Path) -> None:
    version = run(installed_tool / "bin" / "fi-patch", "--version", cwd=tmp_path)
    assert version.returncode == 0
    assert version.stdout.strip() == f"fi-patch {__version__}"
    listing = run(installed_tool / "bin" / "fi-patch", "list", "--json", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    patches = json.loads(listing.stdout)["results"]
    assert [p["id"] for p in patches] == [
        "api-logging-under-compile",
        "cuda-version-torch-first",
        "declared-ops-custom",
        "declared-ops-fake",
        "fp4-op-keyword-forwarding",
        "fp4-quantize-op-boundary",
        "fp4-quantize-under-compile",
        *BOUNDARIES,
    ]
    assert [s["name"] for s in patches[1]["shapes"]] == ["A", "B"]
    # The target runs these by their paths (`python -I -Xutf8 -B .../in_target/probe.py`).
    (scripts,) = installed_tool.glob("lib/python3*/site-packages/fi_patcher/in_target")
    for name in ("probe.py", "imports.py", "preflight.py", "compiles.py", "prove.py"):
        assert (scripts / name).is_file(), name
    assert [p["proof"]["script"] for p in patches] == [
        "api_logging_under_compile.py",
        "cuda_version_torch_first.py",
        "declared_ops.py",
        "declared_ops.py",
        "fp4_op_keyword_forwarding.py",
        "fp4_quantize_op_boundary.py",
        "fp4_quantize_under_compile.py",
        *["boundaries.py"] * len(BOUNDARIES),
    ]


@SLOW
def test_installed_tool_patches_another_venv(
    installed_tool: Path, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.4")
    module = [installed_tool / "bin" / "python", "-m", "fi_patcher"]
    check = run(*module, "check", "--venv", venv, "--json", cwd=tmp_path)
    assert check.returncode == ExitCode.NEEDS_APPLY, check.stderr
    assert patch_result(json.loads(check.stdout))["state"] == "pristine"

    apply = run(installed_tool / "bin" / "fi-patch", "apply", "--venv", venv, cwd=tmp_path)
    assert apply.returncode == 0, apply.stderr
    assert target_file(venv).read_bytes() == expected("0.7.4").encode()
    assert "\x1b[" not in apply.stdout, "colour codes in a pipe"

    check = run(*module, "check", "--venv", venv, cwd=tmp_path)
    assert check.returncode == ExitCode.OK
    assert "patched" in check.stdout


def test_help_answers_the_question(installed_tool: Path, tmp_path: Path) -> None:
    helped = run(installed_tool / "bin" / "fi-patch", "apply", "--help", cwd=tmp_path)
    assert helped.returncode == 0
    for phrase in ("--venv", "--python", "--dry-run", "--force", "backup"):
        assert phrase in helped.stdout


def test_uv_tool_install(tmp_path: Path) -> None:
    """`uv tool install` from the wheel puts a working fi-patch on PATH."""
    wheel = build_wheel(tmp_path / "wheel")
    uv = Path(sys.executable).parent / "uv"
    environ = {
        **os.environ,
        "UV_TOOL_DIR": str(tmp_path / "tools"),
        "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
        "UV_PYTHON_DOWNLOADS": "never",
    }
    subprocess.run(
        [uv, "tool", "install", "-q", "--python", os.path.realpath(sys.executable), wheel],
        check=True,
        env=environ,
    )
    version = run(tmp_path / "bin" / "fi-patch", "--version", cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"fi-patch {__version__}"


def test_make_dev_installs_editable_without_a_warning(tmp_path: Path) -> None:
    """`make dev`'s editable install, into a venv of the test's own: the patches are found from
    the working tree, and setuptools has nothing to warn about (a package mapped from outside
    src/ made it install an import finder, with a BuildBackendWarning in every fresh
    `make test`)."""
    venv = tmp_path / "dev"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-e", ROOT]
    with cache_lock("build"):  # setuptools writes src/fi_patch.egg-info, as build_wheel does
        installed = run(*pip, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    assert "Warning" not in installed.stdout + installed.stderr, installed.stderr
    loaded = run(python, "-c", LOAD, cwd=tmp_path)
    assert loaded.stdout.split() == [str(ROOT / "src"), str(len(load_patches()))], loaded.stderr


# fi-patch's dependencies are not installed there: count the TOML files as the registry finds them.
LOAD = """import fi_patcher, os
from importlib import resources
tomls = [f for f in resources.files("fi_patcher.patches").iterdir() if f.name.endswith(".toml")]
print(os.path.dirname(os.path.dirname(fi_patcher.__file__)), len(tomls))
"""


def dockerfile() -> str:
    text = (ROOT / "docs" / "docker.md").read_text()
    return text.split("```dockerfile", 1)[1].split("```", 1)[0]


@SLOW
def test_the_dockerfile_recipe_steps(venv_with: MakeVenv, tmp_path: Path) -> None:
    """docs/docker.md's own fi-patch steps, read from the page and run in a fresh venv: the
    image cannot be built here (no container registry is reachable), its steps can."""
    wheel = build_wheel(tmp_path / "dist")
    recipe = dockerfile()
    assert f"COPY dist/{wheel.name} /tmp/" in recipe
    runs = [
        line[4:] for line in recipe.replace("\\\n", " ").splitlines() if line.startswith("RUN ")
    ]
    steps = [step.strip() for run in runs for step in run.split("&&") if "fi-patch" in step]
    assert steps == [
        "python3 -m venv /opt/fi-patch",
        f"/opt/fi-patch/bin/pip install /tmp/{wheel.name}",
        "/opt/fi-patch/bin/fi-patch apply --venv $VIRTUAL_ENV",
        "/opt/fi-patch/bin/fi-patch check --venv $VIRTUAL_ENV",
    ]
    target = venv_with("0.7.4")
    home = tmp_path / "fi-patch"
    for step in steps:
        command = (
            step.replace("python3 -m venv", f"{sys.executable} -m venv")
            .replace("/opt/fi-patch", str(home))
            .replace(f"/tmp/{wheel.name}", str(wheel))
        )
        done = subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            text=True,
            env={**os.environ, "VIRTUAL_ENV": str(target), "NO_COLOR": "1"},
            check=False,
        )
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    assert target_file(target).read_bytes() == expected("0.7.4").encode()
