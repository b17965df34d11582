"""One plan, then one write path: apply and revert decide everything before their first write,
the pre-flight judges what is written, and an undo that fails on one file undoes the others.

Real venvs, real processes, a real lock held by a real fi-patch, and a real read-only mount.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from fi_patcher.store import Store
from tests.conftest import MakeVenv
from tests.faults.support import mounted, paused, records, started, stuck
from tests.support.cli import fi_patch, states_of
from tests.support.deps import CPU_TORCH, shared, use
from tests.support.expected import expected
from tests.support.releases import (
    ACTIVATION,
    API_LOGGING,
    BATCHED,
    BOUNDARIES,
    CONCAT_OPS,
    CUDA,
    DECLARED,
    DECLARED_FAKE,
    DECODE,
    FORWARDING,
    FP4,
    FP8_QUANT,
    GEMM,
    GROUPED,
    INTERLEAVE,
    LOGGING,
    MOE_CORE,
    OP_BOUNDARY,
    PREFILL,
    RELEASES,
    ROUTING_DSV3,
    SAMPLING,
    TARGET,
    UNDER_COMPILE,
    UTILS,
    released_text,
)
from tests.support.venvs import fp4_file, replace_bytes, site_packages, target_file

BOTH = "0.7.0"
"""A release whose patches live in two files: cpp_ext.py, then fp4_quantization.py."""


def test_a_revert_that_meets_a_drifted_second_file_touches_nothing(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with(BOTH)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    replace_bytes(fp4_file(venv), fp4_file(venv).read_bytes() + b"# a line of my own\n")
    before = records(venv)

    run = fi_patch(runner, "revert", "--venv", venv, "--json")
    assert run.code == ExitCode.DRIFTED, run.stdout
    (failed,) = run.json["results"]
    assert (failed["status"], failed["error"]["kind"]) == ("error", "Drifted")
    assert f"{fp4_file(venv)} changed since fi-patch wrote it" in failed["error"]["message"]
    assert "nothing was reverted" in failed["error"]["message"]
    # The first file, which revert could have restored, is as fi-patch wrote it.
    assert target_file(venv).read_bytes() == expected(BOTH).encode()
    assert records(venv) == before
    states, _ = states_of(runner, venv)
    assert states[CUDA] == "patched"

    said = fi_patch(runner, "revert", "--venv", venv)
    assert said.code == ExitCode.DRIFTED and "nothing was reverted" in said.text
    forced = fi_patch(runner, "revert", "--venv", venv, "--force", "--json")
    assert forced.code == ExitCode.OK, forced.stdout
    assert {f["action"] for f in forced.json["results"][0]["files"]} == {"reverted"}
    assert target_file(venv).read_bytes() == released_text(RELEASES[BOTH])
    assert fp4_file(venv).read_bytes() == released_text(RELEASES[BOTH], FP4)


def test_a_revert_whose_second_file_cannot_be_written_puts_the_first_back(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """Real: the second file's folder is bind-mounted read-only. revert restores cpp_ext.py,
    then cannot write fp4_quantization.py: it puts cpp_ext.py back as fi-patch wrote it, and
    says that every file is as it was."""
    venv = venv_with(BOTH)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    before = records(venv)
    with mounted(fp4_file(venv).parent, read_only=True):
        run = fi_patch(runner, "revert", "--venv", venv, "--json")
    assert run.code == ExitCode.WRITE, run.stdout
    (result,) = run.json["results"]
    assert result["status"] == "error"
    # Files are written in path order: utils.py, after fp4_quantization.py, was never reached.
    assert {f["relpath"]: f["action"] for f in result["files"]} == {
        ACTIVATION: "rolled-back",
        API_LOGGING: "rolled-back",
        CONCAT_OPS: "rolled-back",
        GEMM: "rolled-back",
        MOE_CORE: "rolled-back",
        ROUTING_DSV3: "rolled-back",
        DECODE: "rolled-back",
        PREFILL: "rolled-back",
        TARGET: "rolled-back",
        FP4: "rolled-back",
    }
    assert {p["patch"]: p["action"] for p in result["patches"]} == {
        LOGGING: "rolled-back",
        CUDA: "rolled-back",
        DECLARED: "rolled-back",
        DECLARED_FAKE: "rolled-back",
        FORWARDING: "rolled-back",
        OP_BOUNDARY: "nothing-to-revert",
        UNDER_COMPILE: "rolled-back",
        **dict.fromkeys(BOUNDARIES, "rolled-back"),
    }
    error = result["error"]
    assert f"cannot write {fp4_file(venv)}: Read-only file system" in error["message"]
    assert f"{target_file(venv)}: put back as it was" in error["details"]
    assert "every file is as it was before this command" in error["remedy"]
    assert target_file(venv).read_bytes() == expected(BOTH).encode()
    assert fp4_file(venv).read_bytes() == expected(BOTH, FP4).encode()
    assert records(venv) == before


def test_an_apply_that_waited_for_a_revert_judges_the_patch_it_now_adds(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    """apply plans (get_cuda_version already patched: nothing for the toolkit to judge) and
    waits for the lock; meanwhile another fi-patch takes cuda-version-torch-first out. On a CPU
    torch the apply, which names it, must then refuse to write it (exit 11), as the same apply
    alone does."""
    venv = venv_with(BOTH)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    taken = fi_patch(runner, "revert", "--venv", venv, "--patch", UNDER_COMPILE, "--no-verify")
    assert taken.code == ExitCode.OK, taken.text
    use(venv, shared(CPU_TORCH))

    go = tmp_path / "go"
    with paused(go, "revert", "--venv", venv, "--patch", CUDA, "--no-verify") as holder:
        deadline = time.monotonic() + 120
        while Store(venv).holder() is None:
            assert holder.poll() is None and time.monotonic() < deadline, holder.communicate()
            time.sleep(0.05)
        named = ("--patch", CUDA, "--patch", UNDER_COMPILE)
        with started("apply", "--venv", venv, *named, "--no-verify", "--json", "-v") as waiting:
            assert waiting.stderr is not None
            seen = []
            for line in waiting.stderr:
                seen.append(line)
                if "waiting for fi-patch revert" in line:
                    break
            assert any("waiting for fi-patch revert" in line for line in seen), seen
            go.touch()
            assert holder.wait(timeout=300) == ExitCode.OK, holder.communicate()
            out, _ = waiting.communicate(timeout=300)

    assert waiting.returncode == ExitCode.INERT, out
    (failed,) = json.loads(out)["results"]
    assert failed["error"]["kind"] == "Inert"
    assert target_file(venv).read_bytes() == released_text(RELEASES[BOTH], TARGET)
    # The quantizers' op boundaries stay in fp4_quantization.py: only fp4-quantize-under-compile
    # was taken out.
    held = [FORWARDING, INTERLEAVE, BATCHED, GROUPED]
    assert fp4_file(venv).read_bytes() == expected(BOTH, FP4, held).encode()


def test_an_undo_that_fails_on_one_file_puts_back_the_others(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """The proofs after the write never finish, and by then the folder of the second file is
    mounted read-only: that file cannot be put back, the first one still is, and the error
    names what each holds."""
    venv = venv_with(BOTH)
    folder = fp4_file(venv).parent
    try:
        child = stuck(folder, "apply", "--venv", venv, "--json")
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
    assert child.returncode == ExitCode.VERIFY_FAILED, child.stderr
    (result,) = json.loads(child.stdout)["results"]
    assert result["status"] == "partial"
    files = {f["relpath"]: f["action"] for f in result["files"]}
    # Files are written in path order: utils.py, after the read-only folder, is put back too;
    # fp8_quantization.py, in that folder, is stranded as fp4_quantization.py is.
    assert files == {
        ACTIVATION: "rolled-back",
        API_LOGGING: "rolled-back",
        CONCAT_OPS: "rolled-back",
        GEMM: "rolled-back",
        MOE_CORE: "rolled-back",
        ROUTING_DSV3: "rolled-back",
        DECODE: "rolled-back",
        PREFILL: "rolled-back",
        TARGET: "rolled-back",
        FP4: "stranded",
        FP8_QUANT: "stranded",
        SAMPLING: "rolled-back",
        UTILS: "rolled-back",
    }
    error = result["error"]
    assert "the proofs did not finish within 1 s" in error["message"]
    assert f"{fp4_file(venv)} holds fi-patch's new bytes" in error["message"]
    assert "Read-only file system" in error["message"]
    kept = {r["relpath"]: r for r in records(venv)}
    assert set(kept) == {FP4, FP8_QUANT}
    backup = venv / ".fi-patch" / "backups" / kept[FP4]["backup"]
    assert f"the original is kept at {backup}" in error["message"]
    assert f"{target_file(venv)}: put back as it was" in error["details"]
    assert "fi-patch revert" in error["remedy"]

    assert target_file(venv).read_bytes() == released_text(RELEASES[BOTH])
    assert fp4_file(venv).read_bytes() != released_text(RELEASES[BOTH], FP4)
    assert backup.read_bytes() == released_text(RELEASES[BOTH], FP4)
    reverted = fi_patch(runner, "revert", "--venv", venv)
    assert reverted.code == ExitCode.OK, reverted.text
    assert fp4_file(venv).read_bytes() == released_text(RELEASES[BOTH], FP4)
    fp8 = site_packages(venv) / FP8_QUANT
    assert fp8.read_bytes() == released_text(RELEASES[BOTH], FP8_QUANT)
    assert records(venv) == []
