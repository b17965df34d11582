"""Every command's --json output validates against docs/schema/output-v6.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result
from tests.support.releases import UNDER_COMPILE
from tests.support.tiers import SLOW

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "docs" / "schema" / "output-v6.json").read_text()
)


def valid(document: Any) -> Any:
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    return document


def test_schema_is_a_valid_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_every_command_output_validates(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.0")
    documents = [
        fi_patch(runner, "list", "--json"),
        fi_patch(runner, "check", "--venv", venv, "--json"),
        fi_patch(runner, "apply", "--venv", venv, "--dry-run", "--json"),
        fi_patch(runner, "apply", "--venv", venv, "--patch", UNDER_COMPILE, "--json"),
        fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json"),
        fi_patch(runner, "apply", "--venv", venv, "--json"),
        fi_patch(runner, "check", "--venv", venv, "--venv", tmp_path / "nope", "--json"),
        fi_patch(runner, "check", "--venv", venv, "--python", venv / "bin" / "python", "--json"),
        fi_patch(
            runner, "revert", "--venv", venv, "--patch", UNDER_COMPILE, "--no-verify", "--json"
        ),
        fi_patch(runner, "revert", "--venv", venv, "--json"),
        fi_patch(runner, "revert", "--venv", venv, "--json"),
        fi_patch(runner, "apply", "--venv", tmp_path / "nope", "--json"),
        fi_patch(runner, "check", "--venv", venv, "--patch", "nope", "--json"),
    ]
    for run in documents:
        document = valid(run.json)
        assert document["exit_code"] == run.code
    # A target that failed is one object in `results`, alone as among several.
    assert documents[3].json["results"][0]["error"]["kind"] == "RequirementUnmet"
    assert documents[-2].json["results"][0]["error"]["kind"] == "EnvironmentProblem"
    assert documents[-2].json["results"][0]["target"] == f"--venv {tmp_path / 'nope'}"
    assert documents[-1].json["error"]["kind"] == "UsageError"
    # The pre-flight check judged, and a note: the same environment named twice.
    assert documents[1].json["results"][0]["preflight"]["nvcc_from"] is not None
    assert len(documents[7].json["notes"]) == 1


@SLOW
def test_verification_output_validates(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.4")
    applied = valid(fi_patch(runner, "apply", "--venv", venv, "--json").json)
    assert set(patch_result(applied)["verification"]) == {"before", "after"}
    checked = valid(fi_patch(runner, "check", "--venv", venv, "--verify", "--json").json)
    assert patch_result(checked)["verification"]["mode"] == "after"


@pytest.mark.parametrize("broken", ["state", "exit_code"])
def test_schema_rejects_what_fi_patch_never_prints(broken: str) -> None:
    document: dict[str, Any] = {
        "schema": 6,
        "command": "check",
        "fi_patch_version": "0.5.0",
        "exit_code": 0,
        "results": [
            {
                "environment": "/e",
                "python": "/e/bin/python",
                "distribution": "flashinfer-python",
                "version": "0.7.4",
                "status": "ok",
                "exit_code": 0,
                "refusal": None,
                "patches": [
                    {
                        "patch": "p",
                        "file": "/f",
                        "function": "f",
                        "shape": "B",
                        "state": "patched",
                        "reason": "r",
                        "sha256": "0" * 64,
                        "interrupted": None,
                        "note": None,
                        "found": None,
                        "forced": False,
                        "apply": "nothing",
                        "refusal": None,
                        "evidence": None,
                        "exit_code": 0,
                    }
                ],
            }
        ],
    }
    valid(document)
    if broken == "state":
        document["results"][0]["patches"][0]["state"] = "half-patched"
    else:
        document["exit_code"] = 99
    with pytest.raises(jsonschema.ValidationError):
        valid(document)


def run_main(*arguments: str | Path, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """The console script's own entry point, in a process of its own; `code` runs first."""
    script = (
        code or ""
    ) + "\nimport sys\nfrom fi_patcher.cli import main\nsys.argv[0] = 'fi-patch'\nmain()\n"
    return subprocess.run(
        [sys.executable, "-c", script, *map(str, arguments)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        pytest.param(("check", "--json", "--nope"), "No such option: --nope", id="unknown-option"),
        pytest.param(
            ("--json", "frobnicate"), "No such command 'frobnicate'", id="unknown-command"
        ),
        pytest.param(("check", "--json", "--venv"), "'--venv' requires an argument", id="no-value"),
        pytest.param(
            ("check", "--venv", "--json"), "--json looks like an option", id="json-as-the-value"
        ),
        pytest.param(("check", "--json", "--timeout", "0.1"), "less than 1 second", id="bad-value"),
    ],
)
def test_usage_errors_print_one_json_document(arguments: tuple[str, ...], message: str) -> None:
    run = run_main(*arguments)
    assert run.returncode == 2, run.stderr
    document = valid(json.loads(run.stdout))
    assert document["error"]["kind"] == "UsageError"
    assert message in document["error"]["message"]
    assert document["exit_code"] == 2
    assert run.stderr == ""


def test_a_bug_prints_one_json_document_saying_where_to_report_it(
    venv_with: MakeVenv,
) -> None:
    venv = venv_with("0.5.0")
    broken = (
        "from fi_patcher import api\n"
        "def check(*a, **k): raise KeyError('surprise')\n"
        "api.check = check\n"
    )
    run = run_main("check", "--venv", venv, "--json", code=broken)
    assert run.returncode == 1, run.stderr
    document = valid(json.loads(run.stdout))
    (failed,) = document["results"]
    assert failed["error"]["kind"] == "Internal"
    assert "KeyError" in failed["error"]["message"]
    assert "please report it to its maintainers" in failed["error"]["remedy"]
    people = run_main("check", "--venv", venv, code=broken)
    assert people.returncode == 1
    assert "error: fi-patch failed: KeyError" in people.stderr
    assert "Traceback" not in people.stderr
