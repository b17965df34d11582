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

from tests.support.venvs import record_row

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
