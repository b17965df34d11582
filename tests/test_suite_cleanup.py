"""The suite cleans up after itself (tests/support/cleanup.py): a session with a failed test
keeps that test's folder and nothing of what the session's fixtures made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SESSION = """
import pytest

@pytest.fixture(scope="session")
def template(tmp_path_factory):
    folder = tmp_path_factory.mktemp("template-0.7.4")
    (folder / "big").write_bytes(bytes(1 << 20))
    return folder

@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    return tmp_path_factory.mktemp("tool")

def test_passes(template, tool, tmp_path):
    (tmp_path / "venv").mkdir()

def test_fails(template, tool, tmp_path):
    (tmp_path / "venv").mkdir()
    raise AssertionError("on purpose")
"""


def test_a_failed_session_keeps_the_failed_tests_folders_only(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "test_session.py").write_text(SESSION)
    temproot = tmp_path / "temproot"
    temproot.mkdir()
    options = ("tmp_path_retention_policy=failed", "tmp_path_retention_count=1")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["-p", "tests.support.cleanup", "-n", "2", "--rootdir", tmp_path / "project"]
        + [arg for option in options for arg in ("-o", option)]
        + [tmp_path / "project" / "test_session.py"],
        cwd=tmp_path / "project",
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DEBUG_TEMPROOT": str(temproot)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1 and "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    # Each xdist worker has a base folder of its own, popen-gwN, under the session's.
    left = [
        path.name
        for path in temproot.glob("pytest-of-*/pytest-[0-9]*/popen-gw*/*")
        if path.is_dir() and not path.is_symlink()
    ]
    assert left == ["test_fails0"], left
