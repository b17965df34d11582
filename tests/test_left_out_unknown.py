"""One function fi-patch has never seen holds back no other patch.

FlashInfer's pre-release 0.7.1rc1 holds RECORD's bytes in every file, and 0.7.1's texts but for
mm_fp4, a text of its own. 0.7.0's wheel is rebuilt as 0.7.5 with one function given one more
statement, as a build would (RECORD rewritten): get_cuda_version (the crash fix's own function),
mm_fp4 (beside two GEMMs in one file), register_fake_op and register_custom_op (which every op-*
patch requires). On each: `check` says apply would write the others and leave that one out with
its evidence (exit 3); `apply` applies and proves every other patch, those in the same file too,
leaves it out and exits 16; `check` then exits 16 and `apply` again writes nothing; `--patch`
naming it is refused with 6, writing nothing; `revert` gives RECORD's bytes back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import Run, fi_patch
from tests.support.relabel import relabelled, statement_added, venv_of
from tests.support.releases import (
    CUDA,
    DECLARED,
    DECLARED_FAKE,
    GEMM,
    MM_FP4,
    RELEASES,
    TARGET,
    UNKNOWN_IN,
    UTILS,
    fetch,
)
from tests.support.tiers import SLOW
from tests.support.venvs import record_sha256, site_packages


def _patches(run: Run) -> dict[str, Any]:
    (result,) = run.json["results"]
    return {p["patch"]: p for p in result["patches"]}


def _as_installed(venv: Path, files: Sequence[str]) -> bool:
    """Every one of `files` holds the bytes RECORD lists for it."""
    site = site_packages(venv)
    return all(
        hashlib.sha256((site / f).read_bytes()).hexdigest() == record_sha256(venv, f) for f in files
    )


def _lives(runner: CliRunner, venv: Path, unknown: str, dependents: Sequence[str] = ()) -> None:
    """The life of a target where `unknown` is a text fi-patch has never seen, and `dependents`
    require it."""
    checked = fi_patch(runner, "check", "--venv", venv, "--json")
    assert checked.code == ExitCode.NEEDS_APPLY, checked.stdout
    states = _patches(checked)
    files = sorted({p["file"].split("site-packages/", 1)[1] for p in states.values() if p["file"]})
    left = states[unknown]
    assert (left["state"], left["apply"], left["exit_code"]) == ("unknown", "left-out", 16)
    assert left["refusal"] is None
    evidence = left["evidence"]
    assert evidence["kind"] == "UnknownLeftOut"
    assert f"text sha256: {left['found']['text_sha256']}" in evidence["details"]
    assert any(d.startswith("found at lines ") for d in evidence["details"])
    assert "apply --force" in left["reason"] or "a fi-patch that knows" in left["reason"]
    for patch in dependents:
        assert states[patch]["state"] == "left-out"
        assert f"requires {unknown}" in states[patch]["reason"]
    known = [
        p
        for p, s in states.items()
        if s["state"] not in ("not-applicable", "unknown") and p not in dependents
    ]
    assert known and all(states[p]["apply"] == "write" for p in known)

    named = fi_patch(runner, "apply", "--venv", venv, "--patch", unknown, "--no-verify")
    assert named.code == ExitCode.UNSUPPORTED, named.text
    assert "refusing to patch" in named.text
    assert _as_installed(venv, files)

    run = fi_patch(runner, "apply", "--venv", venv, "--json")
    assert run.code == ExitCode.LEFT_OUT_UNKNOWN, run.stdout
    (result,) = run.json["results"]
    assert (result["status"], result["exit_code"]) == ("ok", 16)
    done = _patches(run)
    assert done[unknown]["action"] == "left-out"
    assert done[unknown]["evidence"]["details"] == evidence["details"]
    assert any(w.startswith(f"{unknown} left out: ") for w in result["warnings"])
    for patch in known:
        proofs = done[patch]["verification"]
        assert done[patch]["action"] == "applied", done[patch]
        assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), patch

    after = fi_patch(runner, "check", "--venv", venv, "--json")
    assert after.code == ExitCode.LEFT_OUT_UNKNOWN, after.stdout
    now = _patches(after)
    assert {p for p, s in now.items() if s["state"] == "patched"} == set(known)
    assert (now[unknown]["state"], now[unknown]["apply"]) == ("unknown", "left-out")
    people = fi_patch(runner, "check", "--venv", venv)
    assert f"apply would leave out (exit 16): {unknown} left out: " in people.text
    again = fi_patch(runner, "apply", "--venv", venv, "--json")
    assert again.code == ExitCode.LEFT_OUT_UNKNOWN
    assert again.json["results"][0]["files"] == []

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert _as_installed(venv, files)


def test_a_real_pre_release_with_one_text_fi_patch_has_never_seen(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """0.7.1rc1: mm_fp4 is left out, bmm_fp8 and mm_fp8 in its file and every other patch are
    applied; `--force` then writes shape 0.7.1's change over mm_fp4 and the proofs pass."""
    venv = venv_with("0.7.1rc1")
    (unknown,) = UNKNOWN_IN["0.7.1rc1"]
    _lives(runner, venv, unknown)

    run = fi_patch(runner, "apply", "--venv", venv)
    assert run.code == ExitCode.LEFT_OUT_UNKNOWN
    forced = fi_patch(runner, "apply", "--venv", venv, "--force", "--json")
    assert forced.code == ExitCode.OK, forced.stdout
    proofs = _patches(forced)[unknown]["verification"]
    assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
    checked = fi_patch(runner, "check", "--venv", venv, "--json")
    assert checked.code == ExitCode.OK
    assert (_patches(checked)[unknown]["state"], _patches(checked)[unknown]["forced"]) == (
        "patched",
        True,
    )
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert _as_installed(venv, [TARGET, GEMM, UTILS])


OP_PATCHES = tuple(p for p in RELEASES["0.7.0"].shapes if p.startswith("op-"))

CHANGED = [
    pytest.param(TARGET, "get_cuda_version", CUDA, (), id="get_cuda_version"),
    pytest.param(GEMM, "mm_fp4", MM_FP4, (), id="mm_fp4", marks=SLOW),
    pytest.param(UTILS, "register_fake_op", DECLARED_FAKE, (), id="register_fake_op", marks=SLOW),
    pytest.param(
        UTILS, "register_custom_op", DECLARED, (DECLARED_FAKE, *OP_PATCHES), id="register_custom_op"
    ),
]


@pytest.mark.parametrize(("relpath", "function", "unknown", "dependents"), CHANGED)
def test_a_build_with_one_function_changed_by_a_statement(
    runner: CliRunner,
    tmp_path: Path,
    relpath: str,
    function: str,
    unknown: str,
    dependents: tuple[str, ...],
) -> None:
    wheel = relabelled(
        fetch(RELEASES["0.7.0"]), "0.7.0", "0.7.5", tmp_path, {relpath: statement_added(function)}
    )
    venv = venv_of(wheel, tmp_path / "venv-0.7.5")
    assert _as_installed(venv, [relpath]), "RECORD lists the bytes this build has"
    _lives(runner, venv, unknown, dependents)
