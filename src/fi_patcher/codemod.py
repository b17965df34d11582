"""The pure codemod engine: source text in, a result value out. The only module importing libcst.

Recognition (`recognise`) uses hashes of the released function text (exact) or of its
`ast.unparse` form (structural); the rewrite uses libcst so that every byte outside the inserted
lines, line endings included, stays as it was.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from fi_patcher.model import FunctionSpan, Patch, Shape
from fi_patcher.recognise import Unrecognised, locate, recognise

__all__ = ["AlreadyApplied", "Result", "Transformed", "Unrecognised", "transform"]


@dataclass(frozen=True)
class Transformed:
    """The function is a known original: `text` is the patched source."""

    text: str
    shape: Shape
    found: FunctionSpan


@dataclass(frozen=True)
class AlreadyApplied:
    """The function carries exactly this patch over a known original, which `original` restores."""

    original: str
    shape: Shape
    found: FunctionSpan


Result = Transformed | AlreadyApplied | Unrecognised
_Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement


def transform(
    text: str,
    patch: Patch,
    shapes: Sequence[Shape],
    tool_version: str,
    *,
    structural: bool = False,
) -> Result:
    """Patch `text` if its function is one of `shapes`, or say it already is, or say why not.

    With `structural`, a function whose `ast.unparse` form matches a shape counts as that shape even
    if its formatting differs; otherwise only the exact released text does.
    """
    try:
        module = cst.parse_module(text)
        tree = ast.parse(text)
    except (cst.ParserSyntaxError, SyntaxError, ValueError) as exc:
        return Unrecognised(f"not valid Python: {str(exc).strip().splitlines()[0]}")
    located = locate(tree, text, patch.function)
    if isinstance(located, Unrecognised):
        return located
    _, found = located
    definition = _only_definition(module, patch.function)
    own = _own_statements(patch, tool_version)

    if _starts_with_patch(definition, patch, own):
        original = _remove_patch(module, definition, len(own))
        matched = recognise(original, patch, shapes, structural=structural)
        if isinstance(matched, Unrecognised):
            return Unrecognised(
                f"{patch.function} carries fi-patch's {patch.id} statements, but the rest of it "
                "is not a known original",
                found,
            )
        return AlreadyApplied(original, matched.shape, found)

    matched = recognise(text, patch, shapes, structural=structural)
    if isinstance(matched, Unrecognised):
        return matched
    return Transformed(_insert(module, definition, own), matched.shape, matched.found)


# --- rewriting (libcst) -------------------------------------------------------------------------


def _only_definition(module: cst.Module, function: str) -> cst.FunctionDef:
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == function:
            return statement
    raise AssertionError(f"ast found {function} but libcst did not")  # pragma: no cover


def _own_statements(patch: Patch, tool_version: str) -> list[_Statement]:
    statements = list(cst.parse_module(patch.insert).body)
    marker = cst.EmptyLine(indent=True, comment=cst.Comment(patch.marker(tool_version)))
    statements[0] = statements[0].with_changes(leading_lines=[marker])
    return statements


def _body(definition: cst.FunctionDef) -> Sequence[_Statement]:
    body = definition.body
    if not isinstance(body, cst.IndentedBlock):
        return ()
    return [s for s in body.body if isinstance(s, _Statement)]


def _starts_with_patch(
    definition: cst.FunctionDef, patch: Patch, own: Sequence[_Statement]
) -> bool:
    head = _body(definition)[: len(own)]
    if len(head) < len(own):
        return False
    comments = [line.comment for line in head[0].leading_lines]
    if len(comments) != 1 or comments[0] is None:
        return False
    if not comments[0].value.startswith(patch.marker_prefix):
        return False
    return all(_code(a) == _code(b) for a, b in zip(head, own, strict=True))


def _code(statement: _Statement) -> str:
    return cst.Module(body=[statement.with_changes(leading_lines=())]).code


def _replace_body(
    module: cst.Module, definition: cst.FunctionDef, statements: Sequence[_Statement]
) -> str:
    block = definition.body
    assert isinstance(block, cst.IndentedBlock)
    updated = definition.with_changes(body=block.with_changes(body=list(statements)))
    return module.with_changes(body=[updated if s is definition else s for s in module.body]).code


def _insert(module: cst.Module, definition: cst.FunctionDef, own: Sequence[_Statement]) -> str:
    return _replace_body(module, definition, [*own, *_body(definition)])


def _remove_patch(module: cst.Module, definition: cst.FunctionDef, count: int) -> str:
    return _replace_body(module, definition, _body(definition)[count:])
