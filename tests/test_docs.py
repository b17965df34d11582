"""The documents say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

from fi_patcher.errors import ExitCode
from fi_patcher.registry import load_patches

DOCS = Path(__file__).resolve().parents[1] / "docs"
README = Path(__file__).resolve().parents[1] / "README.md"


def test_exit_code_table_matches_the_code() -> None:
    rows = re.findall(r"^\| +(\d+) \| (\w+) \|", (DOCS / "exit-codes.md").read_text(), re.M)
    assert [(int(code), name) for code, name in rows] == [(c.value, c.name) for c in ExitCode]


def test_readme_exit_codes_match_the_code() -> None:
    rows = re.findall(r"^\| +(\d+) \| `(\w+)`", README.read_text(), re.M)
    assert [(int(code), name) for code, name in rows] == [(c.value, c.name) for c in ExitCode]


def test_patch_catalog_lists_every_shape_and_range() -> None:
    text = (DOCS / "patches.md").read_text()
    for patch in load_patches():
        assert f"## `{patch.id}`" in text
        for shape in patch.shapes:
            assert f"| {shape.name} | `{shape.versions}` |" in text
            for digest in shape.function_sha256:
                assert digest in text
        assert f"| - | `{patch.not_applicable}` |" in text


def test_every_json_state_is_documented() -> None:
    from fi_patcher.model import State

    text = (DOCS / "json.md").read_text()
    for state in State:
        assert f"`{state.value}`" in text


def test_fault_table_names_every_fault_test() -> None:
    documented = set(re.findall(r"\| `(test_\w+)` \|", (DOCS / "faults.md").read_text()))
    faults = Path(__file__).resolve().parent / "faults"
    written = {
        name
        for path in faults.glob("test_*.py")
        for name in re.findall(r"^def (test_\w+)\(", path.read_text(), re.M)
    }
    assert documented == written
    assert len(written) >= 25
