"""Read the target distribution's metadata from the target's site-packages, from outside.

Only files are read here: METADATA, RECORD and direct_url.json, through importlib.metadata's
PathDistribution. Nothing of the target is imported.
"""

from __future__ import annotations

import base64
import csv
import json
from importlib.metadata import PathDistribution
from pathlib import Path

from packaging.utils import canonicalize_name

from fi_patcher.errors import LayoutProblem
from fi_patcher.model import Installed, InstalledFile, Interpreter


def find_installed(interpreter: Interpreter, name: str, target: str) -> Installed | None:
    """The one installed distribution `name`, with its `target` file, or None if absent."""
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
    if len(found) > 1:
        raise LayoutProblem(
            f"{name} is installed {len(found)} times in {interpreter.prefix}",
            remedy="remove the stale metadata folders (a crashed install leaves them) "
            "so that one remains, then run fi-patch again",
            details=tuple(str(info) for _, info in found),
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
        file=_installed_file(distribution, site, target),
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


def _installed_file(distribution: PathDistribution, site: Path, target: str) -> InstalledFile:
    """The target's RECORD row. Read directly: `Distribution.files` would build a path object
    for each of the 18,000 rows of a FlashInfer 0.7 RECORD, most of `check`'s time."""
    record = distribution.read_text("RECORD") or ""
    prefix = target + ","
    for row in csv.reader(line for line in record.splitlines() if line.startswith(prefix)):
        if len(row) >= 2 and row[0] == target:
            return InstalledFile(site, target, _sha256_hex(row[1]), recorded=True)
    return InstalledFile(site, target, None, recorded=False)


def _sha256_hex(digest: str) -> str | None:
    """RECORD's `sha256=<urlsafe base64, unpadded>` as hex; None for no or another hash."""
    algorithm, _, value = digest.partition("=")
    if algorithm != "sha256" or not value:
        return None
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
