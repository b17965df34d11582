"""The release venvs the tests clone, built once in the test cache and shared by every test
process and every later run, as the release files and the shared torch are.

A venv is built where it stays (its scripts name their own path), under the cache's lock, and
counts once `.complete` is written. Tests never write into it: each gets a clone whose files are
hardlinks (tests/support/venvs.py), and tests/conftest.py checks at every use that the files a
patch may write still hold the release's bytes. Where the temporary folder is on another file
system than the cache, a hardlink cannot reach: the session copies the venv there once.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from tests.support.deps import CUDA_TORCH, shared, use
from tests.support.releases import CACHE, Release, cache_lock
from tests.support.venvs import create_venv, install

VENVS = CACHE / "venvs"


def cached_venv(release: Release) -> Path:
    """The venv holding `release` and the shared CUDA torch, built on first use."""
    torch = shared(CUDA_TORCH)
    # The venv names its base interpreter and the torch folder: another of either is another venv.
    facts = "\n".join((sys.base_prefix, sys.version, release.filename, str(torch)))
    folder = VENVS / f"{release.version}-{hashlib.sha256(facts.encode()).hexdigest()[:12]}"
    with cache_lock(f"venv-{folder.name}"):
        if not (folder / ".complete").exists():
            shutil.rmtree(folder, ignore_errors=True)
            create_venv(folder / "venv")
            install(folder / "venv", release)
            use(folder / "venv", torch)
            (folder / ".complete").write_text(release.filename + "\n")
    return folder / "venv"


def rebuild(release: Release) -> Path:
    """Build `release`'s venv again (one a test run changed, which that run reported)."""
    folder = cached_venv(release).parent
    with cache_lock(f"venv-{folder.name}"):
        (folder / ".complete").unlink(missing_ok=True)
    return cached_venv(release)


def linkable(venv: Path, folder: Path) -> bool:
    """Whether a hardlink from `folder` can reach `venv` (one file system)."""
    return venv.stat().st_dev == folder.stat().st_dev
