"""Read the target distribution's metadata from the target's site-packages, from outside.

Only files are read here: METADATA, RECORD and direct_url.json, through importlib.metadata's
PathDistribution. Nothing of the target is imported.
"""

from __future__ import annotations

import base64
import csv
import json
from collections.abc import Iterable
from importlib.metadata import PathDistribution
from pathlib import Path

from packaging.utils import canonicalize_name

from fi_patcher.errors import LayoutProblem
from fi_patcher.model import Installed, InstalledFile, Interpreter


def find_installed(interpreter: Interpreter, name: str, targets: Iterable[str]) -> Installed | None:
    """The one installed distribution `name`, with its `targets` files, or None if absent."""
    wanted = canonicalize_name(name)
    found = [
        (site, info)
        for site in interpreter.site_packages
        for info in _metadata_folders(site)
        if canonicalize_name(info.name.removesuffix(info.suffix).split("-", 1)[0]) == wanted
    ]
    links = [
        link
        for site in interpreter.site_packages
        for link in site.glob("*.egg-link")
        if canonicalize_name(link.stem) == wanted
    ]
    if links:
        raise LayoutProblem(
            f"{name} is an editable (develop) install: {links[0]}",
            remedy="fi-patch patches installed copies only; edit your checkout instead, or "
            "install a release with `pip install --force-reinstall`",
        )
    if not found:
        return None
    # The interpreter imports the copy in the first folder on its path; one folder with two
    # metadata folders is a crashed install, which fi-patch cannot read its way through.
    first = [(site, info) for site, info in found if site == found[0][0]]
    if len(first) > 1:
        raise LayoutProblem(
            f"{name} is installed {len(first)} times in {found[0][0]}",
            remedy="remove the stale metadata folders (a crashed install leaves them) "
            "so that one remains, then run fi-patch again",
            details=tuple(str(info) for _, info in first),
        )
    site, info = found[0]
    distribution = PathDistribution(info)
    _refuse_editable(distribution, name)
    version = distribution.metadata["Version"]
    if not version:
        raise LayoutProblem(f"{info} has no Version in its metadata")
    return Installed(
        name=name,
        version=version,
        dist_info=info,
        files=_installed_files(distribution, site, set(targets)),
        shadowed=tuple(other for _, other in found[1:]),
    )


def _metadata_folders(site: Path) -> list[Path]:
    return sorted(
        path
        for pattern in ("*.dist-info", "*.egg-info")
        for path in site.glob(pattern)
        if path.is_dir()
    )


def _refuse_editable(distribution: PathDistribution, name: str) -> None:
    text = distribution.read_text("direct_url.json")
    if not text:
        return
    try:
        direct_url = json.loads(text)
    except json.JSONDecodeError:
        return
    if isinstance(direct_url, dict) and direct_url.get("dir_info", {}).get("editable"):
        raise LayoutProblem(
            f"{name} is an editable install of {direct_url.get('url', 'a local checkout')}",
            remedy="fi-patch patches installed copies only; edit your checkout instead, or "
            "install a release with `pip install --force-reinstall`",
        )


def _installed_files(
    distribution: PathDistribution, site: Path, targets: set[str]
) -> dict[str, InstalledFile]:
    """The targets' RECORD rows. Read directly: `Distribution.files` would build a path object
    for each of the 18,000 rows of a FlashInfer 0.7 RECORD, most of `check`'s time."""
    record = distribution.read_text("RECORD") or ""
    found = {target: InstalledFile(site, target, None, recorded=False) for target in targets}
    wanted = tuple(target + "," for target in targets)
    for row in csv.reader(line for line in record.splitlines() if line.startswith(wanted)):
        if len(row) >= 2 and row[0] in found:
            found[row[0]] = InstalledFile(site, row[0], _sha256_hex(row[1]), recorded=True)
    return found


def _sha256_hex(digest: str) -> str | None:
    """RECORD's `sha256=<urlsafe base64, unpadded>` as hex; None for no or another hash."""
    algorithm, _, value = digest.partition("=")
    if algorithm != "sha256" or not value:
        return None
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
