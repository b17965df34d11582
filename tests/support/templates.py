"""The release venvs the tests clone, built once in the test cache and shared by every test
process and every later run, as the release files and the shared torch are.

A venv is built where it stays (its scripts name their own path), under the cache's lock, and
counts once `.complete` is written. Tests never write into it: each gets a clone whose files are
hardlinks (tests/support/venvs.py), and tests/conftest.py checks at every use that the files a
patch may write still hold the release's bytes. Where the temporary folder is on another file
system than the cache, a hardlink cannot reach: each test process (each xdist worker) copies
the venv there once.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support import deps, venvs
from tests.support.deps import CUDA_TORCH, shared, use
from tests.support.releases import CACHE, Release, cache_lock
from tests.support.venvs import create_venv, install

VENVS = CACHE / "venvs"
_BUILDERS = (sys.modules[__name__], venvs, deps)


def cached_venv(release: Release, sound: Callable[[Path], bool] = lambda venv: True) -> Path:
    """The venv holding `release` and the shared CUDA torch, built on first use, and built again
    where it is not `sound` (an earlier run changed it): judged and rebuilt under one lock, so
    that two processes never both rebuild it."""
    torch = shared(CUDA_TORCH)
    # The venv names its base interpreter and the torch folder: another of either is another
    # venv; so is one that the code building venvs (this module, venvs.py, deps.py) builds
    # otherwise.
    builders = b"".join(Path(module.__file__ or "").read_bytes() for module in _BUILDERS)
    facts = "\n".join((sys.base_prefix, sys.version, release.filename, str(torch)))
    digest = hashlib.sha256(facts.encode() + builders).hexdigest()[:12]
    folder = VENVS / f"{release.version}-{digest}"
    with cache_lock(f"venv-{folder.name}"):
        complete = (folder / ".complete").exists()
        if not (complete and sound(folder / "venv")):
            shutil.rmtree(folder, ignore_errors=True)
            create_venv(folder / "venv")
            install(folder / "venv", release)
            use(folder / "venv", torch)
            (folder / ".complete").write_text(release.filename + "\n")
    return folder / "venv"


def linkable(venv: Path, folder: Path) -> bool:
    """Whether a hardlink from `folder` can reach `venv` (one file system)."""
    return venv.stat().st_dev == folder.stat().st_dev
