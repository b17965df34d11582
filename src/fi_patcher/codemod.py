"""The pure codemod engine: source text in, a result value out. The only module importing libcst.

A file's patched text is its original with each patch applied in registry order (`compose`). Each
patch is recognised first (`recognise`: the hash of the released function text, or of its
`ast.unparse` form), then only that function's lines go through libcst and are spliced back, so
every byte outside them, line endings included, stays as it was, and a 2,800-line module costs
no more than its one function.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from fi_patcher.model import InsertFirst, KeywordArguments, Patch, Shape
from fi_patcher.recognise import Match, Unrecognised, recognise

__all__ = ["Composed", "Unrecognised", "compose"]


@dataclass(frozen=True)
class Composed:
    """The original with every patch applied: `text`, and the shape each patch matched."""

    text: str
    shapes: Mapping[str, Shape]


_Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement
_Rewrite = Callable[[cst.FunctionDef, Patch, Shape, str], cst.FunctionDef | str]


def compose(
    original: str,
    steps: Sequence[tuple[Patch, Sequence[Shape]]],
    tool_version: str,
    *,
    structural: bool = False,
) -> Composed | Unrecognised:
    """Apply each (patch, candidate shapes) in order to `original`, or say why one cannot be.

    With `structural`, a function whose `ast.unparse` form matches a shape counts as that shape
    even if its formatting differs; otherwise only the exact released text does.
    """
    text = original
    shapes: dict[str, Shape] = {}
    for patch, candidates in steps:
        matched = recognise(text, patch, candidates, structural=structural)
        if isinstance(matched, Unrecognised):
            return Unrecognised(f"{patch.id}: {matched.reason}", matched.found)
        rewritten = _rewrite(text, patch, matched, tool_version)
        if isinstance(rewritten, Unrecognised):
            return rewritten
        text, shapes[patch.id] = rewritten, matched.shape
    return Composed(text, shapes)


def _rewrite(text: str, patch: Patch, matched: Match, tool_version: str) -> str | Unrecognised:
    """Rewrite the function's own lines with libcst and splice them back into `text`."""
    lines = re.findall(r"[^\n]*\n|[^\n]+\Z", text)
    start, end = matched.found.start - 1, matched.found.end
    snippet = "".join(lines[start:end])
    if not _same_function(snippet, matched.node):
        return Unrecognised(f"{patch.id}: cannot cut {patch.function} out of its lines")
    module = cst.parse_module(snippet)
    (definition,) = module.body
    assert isinstance(definition, cst.FunctionDef)
    rewrite: _Rewrite = _REWRITES[type(patch.operation)]
    changed = rewrite(definition, patch, matched.shape, tool_version)
    if isinstance(changed, str):
        return Unrecognised(f"{patch.id}: {changed}", matched.found)
    spliced = module.with_changes(body=[changed]).code
    return "".join(lines[:start]) + spliced + "".join(lines[end:])


def _same_function(snippet: str, node: ast.FunctionDef) -> bool:
    """The lines cut out hold exactly the function `ast` found (a lone CR, say, would shift
    them)."""
    try:
        cut = ast.parse(snippet).body
    except SyntaxError:
        return False
    return len(cut) == 1 and ast.dump(cut[0]) == ast.dump(node)


def _marker(patch: Patch, tool_version: str) -> cst.EmptyLine:
    return cst.EmptyLine(indent=True, comment=cst.Comment(patch.marker(tool_version)))


def _block(definition: cst.FunctionDef) -> cst.IndentedBlock | str:
    if not isinstance(definition.body, cst.IndentedBlock):
        return f"{definition.name.value} has its body on the def line"
    return definition.body


# --- operations ---------------------------------------------------------------------------------


def _insert_first(
    definition: cst.FunctionDef, patch: Patch, shape: Shape, tool_version: str
) -> cst.FunctionDef | str:
    """The shape's statements first in the body, after the docstring, under a marker comment."""
    operation = patch.operation
    assert isinstance(operation, InsertFirst) and shape.text is not None
    block = _block(definition)
    if isinstance(block, str):
        return block
    own: list[_Statement] = list(cst.parse_module(operation.texts[shape.text]).body)
    own[0] = own[0].with_changes(leading_lines=[_marker(patch, tool_version)])
    at = 1 if definition.get_docstring(clean=False) is not None else 0
    body = [*block.body[:at], *own, *block.body[at:]]
    return definition.with_changes(body=block.with_changes(body=body))


def _keyword_arguments(
    definition: cst.FunctionDef, patch: Patch, shape: Shape, tool_version: str
) -> cst.FunctionDef | str:
    """The one call of `operation.call` passes its later arguments by keyword, under a marker
    comment on the statement that makes the call."""
    operation = patch.operation
    assert isinstance(operation, KeywordArguments)
    block = _block(definition)
    if isinstance(block, str):
        return block
    wanted = m.Call(func=m.Name(operation.call))
    holders = [s for s in block.body if m.findall(s, wanted)]
    calls = [c for s in holders for c in m.findall(s, wanted)]
    if len(calls) != 1:
        return f"{definition.name.value} calls {operation.call} {len(calls)} times, not once"
    (call,) = calls
    assert isinstance(call, cst.Call)
    arguments = list(call.args)
    later = arguments[operation.positional :]
    if not later or any(a.keyword or a.star or not isinstance(a.value, cst.Name) for a in later):
        return (
            f"the call of {operation.call} does not pass plain names after its first "
            f"{operation.positional} arguments"
        )
    keywords = [
        a.with_changes(
            keyword=cst.Name(a.value.value),  # type: ignore[attr-defined]
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
        )
        for a in later
    ]
    new_call = call.with_changes(args=[*arguments[: operation.positional], *keywords])
    (holder,) = holders
    marked = holder.deep_replace(call, new_call)
    assert isinstance(marked, cst.SimpleStatementLine | cst.BaseCompoundStatement)
    marked = marked.with_changes(
        leading_lines=[*marked.leading_lines, _marker(patch, tool_version)]
    )
    body = [marked if s is holder else s for s in block.body]
    return definition.with_changes(body=block.with_changes(body=body))


_REWRITES: dict[type, _Rewrite] = {
    InsertFirst: _insert_first,
    KeywordArguments: _keyword_arguments,
}
