"""The suite cleans up after itself: a plugin (tests/conftest.py loads it) that empties the
session's base temporary folder when the session ends, but for the folders of failed tests.

pytest's retention policy "failed" removes a passed test's `tmp_path` at once, and the whole base
folder after a session in which every test passed; after a failure it keeps everything the
session and module fixtures made with `tmp_path_factory`: every release's template venv (up to
0.9 GB each), the pip-installed copies and fi-patch's own venvs, gigabytes in all. A failed test's
venvs are hardlinks to a template, so they stay whole when the template goes. Under
pytest-xdist each worker has a base folder of its own (`popen-gwN`) and empties it.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

FAILED = pytest.StashKey[set[Path]]()
"""The `tmp_path` of every test that failed (in its setup, call or teardown) in this process."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    folder = getattr(item, "funcargs", {}).get("tmp_path")
    if report.failed and isinstance(folder, Path):
        item.config.stash.setdefault(FAILED, set()).add(folder)
    return report


@pytest.fixture(scope="session", autouse=True)
def _empty_basetemp(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[None]:
    """Last to be torn down: every other fixture's folder is done with."""
    yield
    kept = pytestconfig.stash.get(FAILED, set())
    for entry in tmp_path_factory.getbasetemp().iterdir():
        # The `<name>current` links pytest makes: those left dead pytest removes itself.
        if entry.is_dir() and not entry.is_symlink() and entry not in kept:
            shutil.rmtree(entry, ignore_errors=True)
