"""A release the catalog has never seen, made from a real one: its wheel rebuilt as a build of
another version would be (the dist-info folder renamed, METADATA's Version and RECORD rewritten),
with, optionally, one file's bytes changed. The result is installed by pip like any wheel."""

from __future__ import annotations

import ast
import csv
import io
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

from tests.support.deps import CUDA_TORCH, shared, use
from tests.support.venvs import create_venv, pip, record_row

Edit = Callable[[bytes], bytes]


def relabelled(
    wheel: Path, old: str, new: str, folder: Path, edits: Mapping[str, Edit] | None = None
) -> Path:
    """`wheel` (of version `old`) rebuilt as version `new` in `folder`; `edits` change files of
    the package by their path in the wheel, and RECORD lists what was written."""
    name = "flashinfer_python"
    before, after = f"{name}-{old}.dist-info/", f"{name}-{new}.dist-info/"
    target = folder / wheel.name.replace(f"-{old}-", f"-{new}-")
    rows: list[tuple[str, str, str]] = []
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w") as built:
        for info in source.infolist():
            path = info.filename.replace(before, after, 1)
            if path == after + "RECORD":
                continue
            data = source.read(info)
            if path == after + "METADATA":
                data = data.replace(f"\nVersion: {old}\n".encode(), f"\nVersion: {new}\n".encode())
                assert f"\nVersion: {new}\n".encode() in data
            if edits and path in edits:
                data = edits[path](data)
            built.writestr(path, data, compress_type=zipfile.ZIP_DEFLATED)
            if not path.endswith("/"):
                rows.append(record_row(path, data))
        rows.append((after + "RECORD", "", ""))
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        built.writestr(after + "RECORD", buffer.getvalue())
    return target


def docstring_changed(data: bytes) -> bytes:
    """fp4_quantize with one more line in its docstring: its text changes, its structure not."""
    text = data.decode("utf-8")
    node = next(
        n
        for n in ast.parse(text).body
        if isinstance(n, ast.FunctionDef) and n.name == "fp4_quantize"
    )
    doc = node.body[0]
    assert isinstance(doc, ast.Expr) and doc.end_lineno and doc.end_lineno > doc.lineno
    lines = text.splitlines(keepends=True)
    indent = " " * doc.col_offset
    lines.insert(doc.lineno, f"{indent}(This build carries a line of its own here.)\n")
    return "".join(lines).encode("utf-8")


def statement_added(function: str) -> Edit:
    """An edit that gives `function` one more statement (`pass`, first after its docstring): its
    text and its structure change, and nothing else in the file. The function is the module's
    top-level one, or, where a version check defines it twice (register_custom_op for an old
    torch and for torch >= 2.4), the one in the `else` branch, which fi-patch patches."""

    def edit(data: bytes) -> bytes:
        text = data.decode("utf-8")
        tree = ast.parse(text)
        top = [*tree.body, *(s for n in tree.body if isinstance(n, ast.If) for s in n.orelse)]
        (node,) = (n for n in top if isinstance(n, ast.FunctionDef) and n.name == function)
        first = node.body[0]
        documented = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        after = node.body[1] if documented and len(node.body) > 1 else first
        decorators = getattr(after, "decorator_list", [])
        line = min([after.lineno, *(d.lineno for d in decorators)])
        lines = text.splitlines(keepends=True)
        lines.insert(line - 1, " " * after.col_offset + "pass\n")
        return "".join(lines).encode("utf-8")

    return edit


def venv_of(wheel: Path, path: Path) -> Path:
    """A venv at `path` holding `wheel`, installed by pip, with the shared CUDA build of torch."""
    venv = create_venv(path)
    pip(venv, "install", "--no-deps", "--no-index", str(wheel))
    use(venv, shared(CUDA_TORCH))
    return venv
