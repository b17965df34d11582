"""Read the target distribution's metadata from the target's site-packages, from outside.

Only files are read here: METADATA (PKG-INFO for an egg-info), RECORD and direct_url.json, as
plain text. Nothing of the target is imported, and neither is importlib.metadata: its email
parser costs every `check` about 10 ms for the one header fi-patch reads.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

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
        said = [_matching(info, site, set(targets)) for site, info in first]
        stale = [
            info.name for (_, info), (_, matches) in zip(first, said, strict=True) if not matches
        ]
        which = (
            f"remove {', '.join(stale)}, whose RECORD does not match the files"
            if stale and len(stale) < len(first)
            else "remove the stale metadata folders (a crashed install leaves them) so that "
            "one remains"
        )
        raise LayoutProblem(
            f"{name} is installed {len(first)} times in {found[0][0]}",
            remedy=f"{which}, then run fi-patch again",
            details=tuple(line for line, _ in said),
        )
    site, info = found[0]
    _refuse_editable(info, name)
    version = _version(info)
    if not version:
        raise LayoutProblem(f"{info} has no Version in its metadata")
    return Installed(
        name=name,
        version=version,
        dist_info=info,
        files=_installed_files(info, site, set(targets)),
        shadowed=tuple(other for _, other in found[1:]),
    )


def _matching(info: Path, site: Path, targets: set[str]) -> tuple[str, bool]:
    """Whether a metadata folder's RECORD matches the files on disk (those fi-patch reads),
    said in a line: which of two folders describes the installed files."""
    said = f"{info}: version {_version(info) or '?'}; its RECORD"
    rows = [f for f in _installed_files(info, site, targets).values() if f.record_sha256]
    differ = []
    for file in rows:
        try:
            data = file.path.read_bytes()
        except OSError:
            differ.append(f"{file.relpath} is missing")
            continue
        if hashlib.sha256(data).hexdigest() != file.record_sha256:
            differ.append(f"{file.relpath} differs")
    if not rows:
        return f"{said} lists none of the files fi-patch reads", False
    if differ:
        return f"{said} does not match: {', '.join(differ)}", False
    return f"{said} matches the files ({len(rows)} checked)", True


def canonicalize_name(name: str) -> str:
    """PEP 503's normal form, as packaging.utils has it (which imports packaging.tags, and so
    sysconfig and platform, at every start)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_folders(site: Path) -> list[Path]:
    return sorted(
        path
        for pattern in ("*.dist-info", "*.egg-info")
        for path in site.glob(pattern)
        if path.is_dir()
    )


def _text(info: Path, name: str) -> str | None:
    try:
        return (info / name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # as importlib.metadata: absent or unreadable
        return None


def _version(info: Path) -> str | None:
    """The `Version` header of the core metadata (headers end at the first blank line)."""
    text = _text(info, "PKG-INFO" if info.suffix == ".egg-info" else "METADATA") or ""
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key.strip().lower() == "version":
            return value.strip()
    return None


def _refuse_editable(info: Path, name: str) -> None:
    text = _text(info, "direct_url.json")
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


def _installed_files(info: Path, site: Path, targets: set[str]) -> dict[str, InstalledFile]:
    """The targets' RECORD rows. Read directly: `Distribution.files` would build a path object
    for each of the 18,000 rows of a FlashInfer 0.7 RECORD, most of `check`'s time."""
    record = _text(info, "RECORD") or ""
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
