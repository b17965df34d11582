"""The patch registry: the TOML files shipped as the package `fi_patcher.patches`."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from importlib import resources
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from fi_patcher.model import Patch, Selection, Shape, Verdict


class RegistryError(Exception):
    """A patch file is malformed: a bug in fi-patch's own data, caught by its tests."""


def load_patches() -> tuple[Patch, ...]:
    """Every patch shipped with fi-patch, ordered by id."""
    folder = resources.files("fi_patcher.patches")
    texts = [
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".toml")
    ]
    return tuple(sorted((parse_patch(name, text) for name, text in texts), key=lambda p: p.id))


def parse_patch(name: str, text: str) -> Patch:
    try:
        data = tomllib.loads(text)
        not_applicable = data["not_applicable"]
        return Patch(
            id=data["id"],
            summary=data["summary"],
            distribution=data["distribution"],
            target=data["target"],
            function=data["function"],
            requires_names=tuple(data["requires_names"]),
            insert=data["insert"].strip("\n") + "\n",
            shapes=tuple(_parse_shape(shape) for shape in data["shapes"]),
            not_applicable=SpecifierSet(not_applicable["versions"]),
            not_applicable_reason=not_applicable["reason"],
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError, InvalidSpecifier) as exc:
        raise RegistryError(f"patch file {name}: {exc!r}") from exc


def _parse_shape(data: dict[str, Any]) -> Shape:
    return Shape(
        name=data["name"],
        versions=SpecifierSet(data["versions"]),
        function_sha256=frozenset(data["function_sha256"]),
        structure_sha256=data["structure_sha256"],
        note=data["note"],
    )


def select(patch: Patch, version: str) -> Selection:
    """Pick the shape for an exact installed version, or say why there is none.

    Pre-releases are never selected (`prereleases=False`: packaging 26 would otherwise admit
    0.6.0rc1 into `>=0.4.0,<=0.7.4`); nobody has checked their text. A `.postN` release is
    selected only where a range's bounds admit it (`<=0.7.4` does not admit 0.7.4.post1).
    """
    try:
        parsed = Version(version)
    except InvalidVersion:
        return Selection(Verdict.UNKNOWN, None, f"{version!r} is not a valid version")
    if patch.not_applicable.contains(parsed, prereleases=False):
        return Selection(Verdict.NOT_APPLICABLE, None, patch.not_applicable_reason)
    for shape in patch.shapes:
        if shape.versions.contains(parsed, prereleases=False):
            return Selection(Verdict.IN_RANGE, shape, f"shape {shape.name} ({shape.versions})")
    return Selection(
        Verdict.UNKNOWN, None, f"{version} is outside every known range: {known_ranges(patch)}"
    )


def known_ranges(patch: Patch) -> str:
    parts: Iterable[str] = (f"shape {s.name} {s.versions}" for s in patch.shapes)
    return "; ".join([*parts, f"nothing to patch {patch.not_applicable}"])
