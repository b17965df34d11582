"""The bytes each patch must produce, built from the released text with line edits only.

Independent of the libcst engine: `ast` finds the lines, and the edits are plain string work, so
a test comparing the engine's output with these bytes checks every byte the engine keeps.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from fi_patcher import __version__
from fi_patcher.model import InsertFirst
from fi_patcher.registry import load_patches, located
from tests.support.releases import (
    CUDA,
    FORWARDING,
    OP_BOUNDARY,
    RELEASES,
    TARGET,
    UNDER_COMPILE,
    released_text,
)

PATCHES = {p.id: p for p in load_patches()}


def target_of(patch: str, version: str) -> str:
    """The file `patch` writes in `version` (fp4_quantize moved in 0.6.7)."""
    return located(PATCHES[patch], version).target


def files_of(version: str) -> list[str]:
    """Every file the registry writes in `version`."""
    return sorted({target_of(p, version) for p in RELEASES[version].shapes})


def marker(patch: str, indent: str = "    ") -> str:
    return f"{indent}# fi-patch: {patch} (fi-patch {__version__})\n"


# fi-patch's own lines in get_cuda_version: the only lines the cuda patch adds.
OWN_LINES = [
    marker(CUDA),
    "    if torch.version.cuda is not None:\n",
    "        return Version(torch.version.cuda)\n",
]


def original(version: str, relpath: str = TARGET) -> str:
    return released_text(RELEASES[version], relpath).decode("utf-8")


def expected(
    version: str,
    relpath: str = TARGET,
    patches: Iterable[str] | None = None,
    newline: str = "\n",
) -> str:
    """The release's file with `patches` (default: every patch the registry applies to it)."""
    release = RELEASES[version]
    wanted = set(patches) if patches is not None else set(release.shapes)
    wanted = {p for p in wanted if target_of(p, version) == relpath}
    lines = original(version, relpath).splitlines(keepends=True)
    # Bottom-up, so that each edit's line numbers still hold.
    edits = sorted((_edit(version, relpath, p) for p in wanted), key=lambda e: -e[0])
    for at, drop, added in edits:
        lines[at : at + drop] = added
    return "".join(lines).replace("\n", newline)


def _edit(version: str, relpath: str, patch: str) -> tuple[int, int, list[str]]:
    """(0-based line, lines replaced, new lines) for one patch."""
    if patch == CUDA:
        at = RELEASES[version].def_line
        assert at is not None
        assert original(version, relpath).splitlines()[at - 1].startswith("def get_cuda_version")
        return at, 0, OWN_LINES
    node = _function(original(version, relpath), PATCHES[patch].function)
    lines = original(version, relpath).splitlines(keepends=True)
    if patch in (UNDER_COMPILE, OP_BOUNDARY):
        docstring = node.body[0]
        assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)
        operation = PATCHES[patch].operation
        assert isinstance(operation, InsertFirst)
        shape = RELEASES[version].shapes[patch]
        key = next(s.text for s in PATCHES[patch].shapes if s.name == shape)
        assert key is not None
        own = [marker(patch)] + ["    " + line for line in operation.texts[key].splitlines(True)]
        assert docstring.end_lineno is not None and node.end_lineno is not None
        if key not in operation.definitions:
            return docstring.end_lineno, 0, own
        # The op and its fake follow the function, two blank lines and a marker above them.
        after = ["\n", "\n", marker(patch, ""), *operation.definitions[key].splitlines(True)]
        body = lines[docstring.end_lineno : node.end_lineno]
        return docstring.end_lineno, len(body), [*own, *body, *after]
    assert patch == FORWARDING
    start = next(
        i
        for i in range(node.lineno - 1, node.end_lineno or 0)
        if lines[i] == "    return fp4_quantize(\n"
    )
    end = lines.index("    )\n", start)
    arguments = lines[start + 1 : end]
    keywords = [re.sub(r"^(\s+)(\w+),\n$", r"\1\2=\2,\n", line) for line in arguments[4:]]
    return start, end - start, [marker(patch), lines[start], *arguments[:4], *keywords]


def _function(text: str, name: str) -> ast.FunctionDef:
    (node,) = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name]
    return node
