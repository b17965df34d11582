"""Recognising FlashInfer's code from its text, with the standard library's `ast` only.

`check` decides every state with this module and hashes; only writing a patch needs the libcst
engine in `codemod`, whose import costs more than the rest.
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from fi_patcher.model import Boundary, FunctionSpan, InsertFirst, Patch, Shape


@dataclass(frozen=True)
class Match:
    """The function is a known original of `shape`."""

    shape: Shape
    found: FunctionSpan
    node: ast.FunctionDef = field(compare=False, repr=False)


@dataclass(frozen=True)
class Unrecognised:
    """Neither a known original nor a known original with this patch: refuse, showing why."""

    reason: str
    found: FunctionSpan | None = None


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode("utf-8"))


def recognise(
    text: str, patch: Patch, shapes: Sequence[Shape], *, structural: bool = False
) -> Match | Unrecognised:
    """Which of `shapes` the function in `text` is, exactly (or, with `structural`, by its
    `ast.unparse` form), and whether the module imports what the patch will use."""
    tree = parse(text)
    if isinstance(tree, Unrecognised):
        return tree
    return recognise_in(tree, text, patch, shapes, structural=structural)


# CPython 3.11 counts the AST constructor's recursion depth in state every thread shares: two
# threads parsing at once (check of several targets) can fail with "SystemError: AST
# constructor recursion depth mismatch". One parse at a time.
_PARSING = threading.Lock()


def parse(text: str) -> ast.Module | Unrecognised:
    try:
        return parse_module(text)
    except (SyntaxError, ValueError) as exc:
        return Unrecognised(f"not valid Python: {_first_line(exc)}")


def parse_module(text: str) -> ast.Module:
    """`ast.parse`, one thread at a time."""
    with _PARSING:
        return ast.parse(text)


def recognise_in(
    tree: ast.Module, text: str, patch: Patch, shapes: Sequence[Shape], *, structural: bool
) -> Match | Unrecognised:
    """`recognise` on a module already parsed: a file with several patches is parsed once."""
    located = locate(tree, text, patch.function, patch.scope)
    if isinstance(located, Unrecognised):
        return located
    node, found = located
    shape = _match_node(node, found, shapes, structural)
    if shape is None:
        kind = "structure" if structural else "text"
        return Unrecognised(
            f"the {kind} of {patch.function} is not one fi-patch knows ({_shape_names(shapes)})",
            found,
        )
    operation = patch.operation
    if isinstance(operation, Boundary) and _bounded(tree, node):
        # The function's own lines are unchanged: what follows them says it is patched.
        return Unrecognised(
            f"the text of {patch.function} with what follows it is not one fi-patch knows: "
            "fi-patch's op boundary follows it already",
            found,
        )
    needed = operation.names_for(shape.text) if isinstance(operation, InsertFirst) else ()
    missing = [name for name in needed if name not in _module_names(tree)]
    if missing:
        return Unrecognised(
            f"the module does not import {', '.join(missing)}, which {patch.id} uses", found
        )
    return Match(shape, found, node)


def _bounded(tree: ast.Module, node: ast.stmt) -> bool:
    """Whether one of the two statements right after `node` calls fi-patch's op boundary: an
    `if` or an import, not a class or function that holds such a call in its body (a wrapper
    class after single_decode_with_kv_cache holds its run()'s)."""
    return any(
        not isinstance(s, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and "_fi_patch_boundary" in ast.dump(s)
        for s in following(tree, node)[:2]
    )


def locate(
    tree: ast.Module, text: str, function: str, scope: str = ""
) -> tuple[ast.FunctionDef, FunctionSpan] | Unrecognised:
    """The one `function` in `scope` (`siblings_in`), and its lines from the first decorator to the
    last line."""
    nodes = definitions(tree, function, scope)
    where = scope_words(scope)
    if not nodes:
        if not scope:
            return Unrecognised(f"no top-level function {function}")
        return Unrecognised(f"no function {function} in {where}")
    if len(nodes) > 1:
        return Unrecognised(f"{function} is defined {len(nodes)} times in {where}")
    node = nodes[0]
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    end = node.end_lineno or node.lineno
    # Released files use LF; hashing LF-normalised lines lets a CRLF copy match its original.
    lines = text.replace("\r\n", "\n").split("\n")
    span_text = "".join(line + "\n" for line in lines[start - 1 : end])
    return node, FunctionSpan(start, end, span_text)


def definitions(tree: ast.Module, function: str, scope: str = "") -> list[ast.FunctionDef]:
    """Every definition of `function` in `scope` (`siblings_in`), but its `@overload` stubs: they
    only annotate it (single_decode_with_kv_cache has two, for `return_lse`)."""
    return [
        n
        for n in siblings_in(tree, scope)
        if isinstance(n, ast.FunctionDef) and n.name == function and not _overload(n)
    ]


def _overload(node: ast.FunctionDef) -> bool:
    """Whether `node` is decorated with `typing.overload` (`@overload` or `@typing.overload`)."""
    return any(
        (isinstance(d, ast.Name) and d.id == "overload")
        or (isinstance(d, ast.Attribute) and d.attr == "overload")
        for d in node.decorator_list
    )


def siblings_in(tree: ast.Module, scope: str) -> list[ast.stmt]:
    """The statements of `scope`, where a patch's function is defined: top level (""); `else`,
    the else branches of top-level `if` statements (flashinfer/utils.py defines
    register_custom_op once for an old torch and once, in the else branch, for torch >= 2.4); or
    a dotted path of the functions that hold it (`flashinfer_api.decorator`: the wrapper
    FlashInfer's API logging returns) or classes (`BatchDecodeWithPagedKVCacheWrapper`: its
    methods). Empty where a function or class of the path is not there exactly once."""
    if not scope:
        return list(tree.body)
    if scope == "else":
        return [s for n in tree.body if isinstance(n, ast.If) for s in n.orelse]
    if not nested(scope):
        raise ValueError(f"unknown scope {scope!r}")
    block: list[ast.stmt] = list(tree.body)
    for name in scope.split("."):
        held = [
            n for n in block if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name
        ]
        if len(held) != 1:
            return []
        block = list(held[0].body)
    return block


def nested(scope: str) -> bool:
    """Whether `scope` is a dotted path of functions and classes (`flashinfer_api.decorator`,
    `BatchDecodeWithPagedKVCacheWrapper`)."""
    return scope != "else" and all(part.isidentifier() for part in scope.split("."))


def scope_words(scope: str) -> str:
    """Where `scope` is, in words."""
    if not scope:
        return "top level"
    if scope == "else":
        return "the else branch of a top-level if"
    # A class's name starts with a capital letter (FlashInfer's are all CamelCase).
    return f"{'class' if scope.split('.')[-1][:1].isupper() else 'function'} {scope}"


def following(tree: ast.Module, node: ast.stmt) -> list[ast.stmt]:
    """The statements after `node` in the block that holds it."""
    for parent in ast.walk(tree):
        for block in (getattr(parent, "body", None), getattr(parent, "orelse", None)):
            if isinstance(block, list) and node in block:
                return block[block.index(node) + 1 :]
    return []


def structure_sha256(node: ast.FunctionDef) -> str:
    """sha256 of the function's structure: `ast.unparse` of it without its docstring, so that
    comments, layout and the docstring do not count (decorators, signature and code do)."""
    body = node.body
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        body = body[1:] or [ast.Pass()]
    bare = copy.copy(node)
    bare.body = body
    return sha256_text(ast.unparse(bare))


def defines(tree: ast.Module, function: str, scope: str = "") -> bool:
    """Whether the module defines `function` in `scope` (top level by default)."""
    return bool(definitions(tree, function, scope))


def render_diff(before: str, after: str, path: str) -> str:
    """A unified diff with three lines of context, as `git diff` shows it."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )


def _match_node(
    node: ast.FunctionDef, found: FunctionSpan, shapes: Sequence[Shape], structural: bool
) -> Shape | None:
    raw = sha256_text(found.text)
    for shape in shapes:
        if raw in shape.function_sha256:
            return shape
    if structural:
        normalized = structure_sha256(node)
        for shape in shapes:
            if normalized == shape.structure_sha256:
                return shape
    return None


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).partition(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _shape_names(shapes: Sequence[Shape]) -> str:
    return ", ".join(f"shape {s.name}" for s in shapes) or "no shape selected"


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
