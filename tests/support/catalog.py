"""What each patch finds in a real release, by the release's own files: the same reading
`check` makes (`fi_patcher.identify`), run on the files of the archive on the index. The
parametrized test of every patch's `[[cases]]` and `scripts/catalog.py` both use it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import Version

from fi_patcher.identify import identify, looked_into, read, where
from fi_patcher.model import Fit, Patch
from fi_patcher.registry import load_patches
from tests.support.releases import release, released_files


@dataclass(frozen=True)
class Found:
    """One patch in one release: where its function is, and what it is."""

    patch: Patch
    """Placed at the file that holds its function (`where`)."""
    fit: Fit


def newest_named() -> Version:
    """The newest release a range of the catalog names (the highest of its upper bounds)."""
    ranges = [
        r
        for p in load_patches()
        for r in (*(s.versions for s in p.shapes), *(e.versions for e in p.not_applicable))
    ]
    return max(Version(s.version) for r in ranges for s in r if s.operator in ("<=", "=="))


def found_in(
    version: str, patches: Sequence[Patch] = (), *, whole: bool = False
) -> dict[str, Found]:
    """Every patch of the registry (or of `patches`), read in `version`'s released files, by
    patch id: as check reads them, with only the bodies patches read (`looked_into`), or with
    `whole`, every body."""
    files = released_files(release(version))
    patches = patches or load_patches()
    keep = looked_into(patches)
    relpaths = {t for p in patches for t in p.targets}
    readings = {r: read(r, files.get(r), None if whole else keep[r]) for r in relpaths}
    found = {}
    for patch in patches:
        placed = where(patch, readings, version)
        found[patch.id] = Found(placed, identify(placed, readings.get(placed.target), version))
    return found
