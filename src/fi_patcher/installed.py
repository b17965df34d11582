"""Read the target distribution's metadata from the target's site-packages, from outside.

Only files are read here: METADATA, RECORD and direct_url.json, through importlib.metadata's
PathDistribution. Nothing of the target is imported.
"""

from __future__ import annotations

import base64
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
        file=InstalledFile(
            site,
            target,
            _record_sha256(distribution, target),
            recorded=any(p.as_posix() == target for p in distribution.files or ()),
        ),
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


def _record_sha256(distribution: PathDistribution, target: str) -> str | None:
    for path in distribution.files or ():
        if path.as_posix() == target and path.hash is not None and path.hash.mode == "sha256":
            padded = path.hash.value + "=" * (-len(path.hash.value) % 4)
            return base64.urlsafe_b64decode(padded).hex()
    return None
