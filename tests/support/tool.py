"""fi-patch built as a wheel, the way pipx, uv tool and Ansible install it."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

from tests.support.releases import cache_lock

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(folder: Path) -> Path:
    """The wheel, built the way `make dist` builds it (`python -m build`). One build at a time:
    setuptools works in the repository's own build/ folder."""
    with cache_lock("build"):
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", folder, ROOT],
            check=True,
            capture_output=True,
        )
    (wheel,) = folder.glob("fi_patch-*.whl")
    return wheel


def released_tool(commit: str, folder: Path) -> Path:
    """fi-patch as it was at `commit` of this repository's history, installed in a venv of its
    own under `folder`: its `fi-patch` command."""
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", "--format=tar", commit], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder / "fi-patch", filter="data")
    subprocess.run([sys.executable, "-m", "venv", folder / "venv"], check=True)
    pip = [folder / "venv" / "bin" / "python", "-m", "pip", "install", "-q"]
    subprocess.run([*pip, folder / "fi-patch"], check=True)
    return folder / "venv" / "bin" / "fi-patch"
