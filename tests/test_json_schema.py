"""Every command's --json output validates against docs/schema/output-v1.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from tests.conftest import MakeVenv
from tests.support.cli import fi_patch

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "docs" / "schema" / "output-v1.json").read_text()
)


def valid(document: Any) -> Any:
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    return document


def test_schema_is_a_valid_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_every_command_output_validates(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.5.0")
    documents = [
        fi_patch(runner, "list", "--json"),
        fi_patch(runner, "check", "--venv", venv, "--json"),
        fi_patch(runner, "apply", "--venv", venv, "--dry-run", "--json"),
        fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json"),
        fi_patch(runner, "apply", "--venv", venv, "--json"),
        fi_patch(runner, "check", "--venv", venv, "--venv", tmp_path / "nope", "--json"),
        fi_patch(runner, "revert", "--venv", venv, "--json"),
        fi_patch(runner, "revert", "--venv", venv, "--json"),
        fi_patch(runner, "apply", "--venv", tmp_path / "nope", "--json"),
    ]
    for run in documents:
        document = valid(run.json)
        assert document["exit_code"] == run.code
    assert documents[-1].json["error"]["kind"] == "EnvironmentProblem"


def test_verification_output_validates(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.4")
    applied = valid(fi_patch(runner, "apply", "--venv", venv, "--json").json)
    assert set(applied["results"][0]["verification"]) == {"before", "after"}
    checked = valid(fi_patch(runner, "check", "--venv", venv, "--verify", "--json").json)
    assert checked["results"][0]["verification"]["mode"] == "after"


@pytest.mark.parametrize("broken", ["state", "exit_code"])
def test_schema_rejects_what_fi_patch_never_prints(broken: str) -> None:
    document = {
        "schema": 1,
        "command": "check",
        "fi_patch_version": "0.1.0",
        "exit_code": 0,
        "results": [
            {
                "environment": "/e",
                "python": "/e/bin/python",
                "patch": "p",
                "distribution": "flashinfer-python",
                "version": "0.7.4",
                "shape": "B",
                "file": "/f",
                "state": "patched",
                "reason": "r",
                "sha256": "0" * 64,
                "exit_code": 0,
            }
        ],
    }
    if broken == "state":
        document["results"][0]["state"] = "half-patched"  # type: ignore[index]
    else:
        document["exit_code"] = 99
    with pytest.raises(jsonschema.ValidationError):
        valid(document)
