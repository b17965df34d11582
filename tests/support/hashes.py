"""The two hashes the registry keys a function by, computed the way docs/patches.md says: sha256
of the exact lines from the first decorator to the last line, and of its structure (`ast.unparse`
without its docstring)."""

from __future__ import annotations

import ast

from fi_patcher.recognise import Unrecognised, locate, sha256_text, structure_sha256


def function_hashes(text: str, function: str, scope: str = "") -> tuple[str, str] | None:
    """(raw, structural) sha256 of the one `function` in `text` (top level, or in the else
    branch of a top-level if: `scope`), if there is one."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    located = locate(tree, text, function, scope)
    if isinstance(located, Unrecognised):
        return None
    node, found = located
    return sha256_text(found.text), structure_sha256(node)
