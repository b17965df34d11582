"""What a person sees: help, version, list and check tables, no colour in a pipe."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher import __version__
from fi_patcher.errors import ExitCode
from fi_patcher.registry import load_patches
from tests.conftest import MakeVenv
from tests.support.cli import Run, fi_patch, patch_result
from tests.support.tiers import SLOW
from tests.support.venvs import target_file


def test_version(runner: CliRunner) -> None:
    run = fi_patch(runner, "--version")
    assert run.code == ExitCode.OK
    assert run.stdout == f"fi-patch {__version__}\n"


def test_help_lists_the_commands(runner: CliRunner) -> None:
    run = fi_patch(runner, "--help")
    assert run.code == ExitCode.OK
    for command in ("apply", "revert", "check", "list"):
        assert command in run.stdout
    assert "never on the interpreter running fi-patch" in run.text


def test_list_shows_every_patch_with_ranges_lowest_first(runner: CliRunner) -> None:
    wide = CliRunner(env={"VIRTUAL_ENV": None, "NO_COLOR": "1", "COLUMNS": "200"})
    run = fi_patch(wide, "list")
    assert run.code == ExitCode.OK
    for patch in ("cuda-version-torch-first", "fp4-op-keyword-forwarding"):
        assert patch in run.stdout.splitlines()
    assert "0.2.14.post1 \u2013 0.3.1.post1" in run.text
    assert "0.4.0 \u2013 0.7.4" in run.text
    assert "0.2.0.post1 \u2013 0.2.14" in run.text
    assert "0.6.12 \u2013 0.7.0.post1" in run.text
    assert "function: get_cuda_version() file: flashinfer/jit/cpp_ext.py" in run.text
    assert "function: fp4_quantize() file: flashinfer/quantization/fp4_quantization.py" in run.text
    assert "shape B (0.4.0 \u2013 0.7.4)" in run.text
    assert "nothing to patch (0.2.0.post1 \u2013 0.2.14)" in run.text
    assert "requires: torch >=2.4, fp4-op-keyword-forwarding where it applies" in run.text
    assert "proof on a CPU: torch.compile(fullgraph=True) of a function calling" in run.text
    assert "proof on a GPU: scripts/gpu/fp4_compiled.py" in run.text


def test_check_table_for_people(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.4")
    run = fi_patch(runner, "check", "--venv", venv)
    assert run.code == ExitCode.NEEDS_APPLY
    assert f"environment {venv}" in run.text
    assert "flashinfer-python 0.7.4" in run.text
    # Each file, then the patches that write it, with their state and what apply would do.
    assert "flashinfer/jit/cpp_ext.py cuda-version-torch-first pristine write" in run.text
    assert "fp4-op-keyword-forwarding not-applicable -" in run.text
    assert "fp4-quantize-under-compile pristine write" in run.text
    # Below, each patch's reason, naming the shape its function was taken for.
    assert "cuda-version-torch-first: FlashInfer's original get_cuda_version (shape B)" in run.text
    assert "needs apply" in run.text
    assert "\x1b[" not in run.stdout


def test_a_log_of_80_columns_never_breaks_a_path(venv_with: MakeVenv) -> None:
    """Not a terminal (CI, Ansible, `| tee`): rich lays out 80 columns; the state table and the
    summary of several targets still hold each path whole on one line, and fit."""
    first, second = venv_with("0.7.4"), venv_with("0.7.4")
    log = CliRunner(
        env={"VIRTUAL_ENV": None, "CONDA_PREFIX": None, "NO_COLOR": "1", "COLUMNS": "80"}
    )
    run = fi_patch(log, "check", "--venv", first, "--venv", second)
    assert run.code == ExitCode.NEEDS_APPLY, run.text
    lines = run.stdout.splitlines()
    assert lines.count("flashinfer/quantization/fp4_quantization.py") == 2, run.text
    # Only the lines that name a venv (its path is as long as pytest's folder makes it) are wider.
    named = [line for line in lines if any(str(venv) in line for venv in (first, second))]
    assert [line for line in lines if len(line) > 80 and line not in named] == []
    for venv in (first, second):
        assert sum(line.startswith(f"--venv {venv} ") for line in lines) == 1, run.text
    # The summary's results wrap between words within 80 columns, every patch id whole.
    results = lines[lines.index("summary") :]
    assert [line for line in results if line.startswith("  ") and len(line) > 80] == []
    words = " ".join(results).split()
    assert " ".join(words).count("op-silu-and-mul-scaled-nvfp4-experts-quantize pristine") == 2
    # Neither the state table nor the summary pads a row's end with spaces.
    assert [line for line in lines if line != line.rstrip()] == []


def test_dry_run_for_people_shows_the_diff(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.2.14.post1")
    run = fi_patch(runner, "apply", "--venv", venv, "--dry-run")
    assert run.code == ExitCode.OK
    assert "@@ -24,6 +24,9 @@" in run.stdout
    assert "+    if torch.version.cuda is not None:" in run.stdout
    assert "dry run: this diff would be applied; nothing was changed" in run.text


def test_revert_json(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    run = fi_patch(runner, "revert", "--venv", venv, "--json")
    assert run.code == ExitCode.OK
    assert patch_result(run.json)["action"] == "reverted"
    files = {f["relpath"]: (f["action"], f["patches"]) for f in run.json["results"][0]["files"]}
    assert files == {
        "flashinfer/jit/cpp_ext.py": ("reverted", []),
        "flashinfer/fp4_quantization.py": ("reverted", []),
        "flashinfer/utils.py": ("reverted", []),
        "flashinfer/decode.py": ("reverted", []),
        "flashinfer/prefill.py": ("reverted", []),
        "flashinfer/fused_moe/core.py": ("reverted", []),
    }


def test_quiet_prints_only_outcomes(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    check = fi_patch(runner, "-q", "check", "--venv", venv)
    assert check.code == ExitCode.NEEDS_APPLY
    assert check.stdout.splitlines() == [
        # 0.5.0 has no API-logging wrapper (0.6.0 brought it).
        f"{venv}: api-logging-under-compile not-applicable",
        f"{venv}: cuda-version-torch-first pristine",
        f"{venv}: declared-ops-custom pristine",
        f"{venv}: declared-ops-fake pristine",
        f"{venv}: fp4-op-keyword-forwarding not-applicable",
        f"{venv}: fp4-quantize-op-boundary pristine",
        f"{venv}: fp4-quantize-under-compile not-applicable",
        # 0.5.0's activations are older texts than the op boundaries cover (0.6.0 on), its
        # GEMMs live in flashinfer/gemm.py, not gemm/gemm_base.py, and its quantizers in
        # flashinfer/fp4_quantization.py and fp8_quantization.py, not flashinfer/quantization/;
        # its samplers are older texts too (the op boundaries cover 0.6.7 on, the renorm
        # samplers 0.6.0 on); it has no flashinfer/concat_ops.py (0.6.0 on), and no
        # fused_topk_deepseek (0.6.0 on); its wrappers' run() are older texts than their ops
        # cover (0.6.0 on). Its cutlass_fused_moe has an op (0.4.1 on).
        f"{venv}: op-batch-decode-with-paged-kv-cache-run not-applicable",
        f"{venv}: op-batch-prefill-with-paged-kv-cache-run not-applicable",
        f"{venv}: op-batch-prefill-with-ragged-kv-cache-run not-applicable",
        f"{venv}: op-block-scale-interleave not-applicable",
        f"{venv}: op-bmm-fp8 not-applicable",
        f"{venv}: op-concat-mla-k not-applicable",
        f"{venv}: op-cutlass-fused-moe pristine",
        f"{venv}: op-fused-topk-deepseek not-applicable",
        f"{venv}: op-gelu-and-mul not-applicable",
        f"{venv}: op-gelu-tanh-and-mul not-applicable",
        f"{venv}: op-min-p-sampling-from-probs not-applicable",
        f"{venv}: op-mm-fp4 not-applicable",
        f"{venv}: op-mm-fp8 not-applicable",
        f"{venv}: op-mxfp8-quantize not-applicable",
        f"{venv}: op-nvfp4-batched-quantize not-applicable",
        f"{venv}: op-scaled-fp4-grouped-quantize not-applicable",
        f"{venv}: op-silu-and-mul not-applicable",
        f"{venv}: op-silu-and-mul-scaled-nvfp4-experts-quantize not-applicable",
        # The single-request attention's ops cover 0.2.6 on.
        f"{venv}: op-single-decode-with-kv-cache pristine",
        f"{venv}: op-single-prefill-with-kv-cache pristine",
        f"{venv}: op-top-k-mask-logits not-applicable",
        f"{venv}: op-top-k-renorm-probs not-applicable",
        f"{venv}: op-top-k-sampling-from-probs not-applicable",
        f"{venv}: op-top-k-top-p-sampling-from-probs not-applicable",
        f"{venv}: op-top-p-renorm-probs not-applicable",
        f"{venv}: op-top-p-sampling-from-probs not-applicable",
        # trtllm_batch_decode_with_kv_cache's op covers 0.6.0 on: 0.5.0's is an older text.
        f"{venv}: op-trtllm-batch-decode-with-kv-cache not-applicable",
        # The fused MoE's ops cover 0.5.0's FP4 (0.2.11.post3 on) and its routed variant (0.2.10
        # on), FP8 block scales and FP8 per tensor (0.2.9 on); 0.5.0 has no trtllm_bf16_moe
        # (0.5.3 on), and the other variants' ops begin later.
        f"{venv}: op-trtllm-bf16-moe not-applicable",
        f"{venv}: op-trtllm-bf16-routed-moe not-applicable",
        f"{venv}: op-trtllm-fp4-block-scale-moe pristine",
        f"{venv}: op-trtllm-fp4-block-scale-routed-moe pristine",
        f"{venv}: op-trtllm-fp8-block-scale-moe pristine",
        f"{venv}: op-trtllm-fp8-block-scale-routed-moe not-applicable",
        f"{venv}: op-trtllm-fp8-per-channel-scale-moe not-applicable",
        f"{venv}: op-trtllm-fp8-per-channel-scale-routed-moe not-applicable",
        f"{venv}: op-trtllm-fp8-per-tensor-scale-moe pristine",
        f"{venv}: op-trtllm-fp8-per-tensor-scale-routed-moe not-applicable",
        f"{venv}: op-trtllm-mxint4-block-scale-moe not-applicable",
        f"{venv}: op-trtllm-mxint4-block-scale-routed-moe not-applicable",
    ]
    # The demo's dry run: what would be applied, and no word of a diff it does not show.
    dry = fi_patch(runner, "-q", "apply", "--venv", venv, "--dry-run", "--no-verify")
    assert dry.code == ExitCode.OK
    assert "@@" not in dry.stdout and "this diff" not in dry.stdout
    assert "dry run: nothing was changed" in dry.stdout
    assert "would apply cuda-version-torch-first to flashinfer/jit/cpp_ext.py" in dry.stdout
    apply = fi_patch(runner, "-q", "apply", "--venv", venv, "--no-verify")
    assert apply.code == ExitCode.OK
    assert "@@" not in apply.stdout and "pre-flight" not in apply.stdout
    assert apply.stdout.startswith("applied cuda-version-torch-first")
    assert "warning: verification skipped (--no-verify)" in apply.stderr


def test_verbose_prints_each_step_with_its_time(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    run = fi_patch(runner, "-v", "apply", "--venv", venv, "--dry-run")
    assert run.code == ExitCode.OK
    assert re.search(r"\[ *\d+\.\ds\] pre-flight in .*/bin/python", run.stderr)


def test_quiet_and_verbose_together_is_usage(runner: CliRunner) -> None:
    assert fi_patch(runner, "-q", "-v", "list").code == ExitCode.USAGE


def test_no_color_even_on_a_terminal(venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    colour = CliRunner(env={"VIRTUAL_ENV": None, "FORCE_COLOR": "1", "NO_COLOR": None})
    plain = CliRunner(env={"VIRTUAL_ENV": None, "FORCE_COLOR": "1", "NO_COLOR": "1"})
    foreground = re.compile(r"\x1b\[[0-9;]*3[0-7]m")
    assert foreground.search(fi_patch(colour, "apply", "--venv", venv, "--dry-run").stdout)
    assert not foreground.search(fi_patch(plain, "apply", "--venv", venv, "--dry-run").stdout)


@pytest.mark.parametrize("command", ["apply", "revert", "check", "list"])
def test_help_shows_no_type_tags_and_no_repository_paths(runner: CliRunner, command: str) -> None:
    wide = CliRunner(env={"VIRTUAL_ENV": None, "NO_COLOR": "1", "COLUMNS": "200"})
    helped = fi_patch(wide, command, "--help")
    assert helped.code == ExitCode.OK
    assert not re.search(r"<(bool|str|path|float|int|list)[^>]*>", helped.stdout), helped.stdout
    assert "[x>=" not in helped.stdout
    assert "docs/" not in helped.stdout and ".md" not in helped.stdout


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(("-q", "check", "--json"), id="quiet-before-json-after"),
        pytest.param(("--json", "check", "-q"), id="json-before-quiet-after"),
        pytest.param(("check", "-q", "--json"), id="both-after"),
    ],
)
def test_flags_before_or_after_the_command(
    runner: CliRunner, venv_with: MakeVenv, arguments: tuple[str, ...]
) -> None:
    venv = venv_with("0.5.0")
    run = fi_patch(runner, *arguments, "--venv", venv)
    assert run.code == ExitCode.NEEDS_APPLY
    assert patch_result(run.json)["state"] == "pristine"
    assert run.stderr == ""


def test_verbose_after_the_command_and_revert_says_its_steps(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify", "-q").code == ExitCode.OK
    run = fi_patch(runner, "revert", "--venv", venv, "-v")
    assert run.code == ExitCode.OK
    assert f"environment {venv}" in run.stdout
    assert re.search(r"\[ *\d+\.\ds\] taking cuda-version-torch-first out of ", run.stderr)
    assert fi_patch(runner, "check", "-q", "--venv", venv, "-v").code == ExitCode.USAGE


def test_a_timeout_under_a_second_is_usage(runner: CliRunner) -> None:
    run = fi_patch(runner, "check", "--venv", "/nonexistent", "--timeout", "0.5")
    assert run.code == ExitCode.USAGE
    assert "0.5 is less than 1 second" in run.text


@SLOW
def test_two_venvs_of_one_release_are_checked_at_once(venv_with: MakeVenv) -> None:
    """Several targets are checked in threads, and each parses FlashInfer's files with `ast`.
    CPython 3.11 counts the AST constructor's depth in state the threads share: parsing at once
    failed now and then with "SystemError: AST constructor recursion depth mismatch" (1 run in
    25 of this test, after the fault tests), which is what made CI's 80-column log lose a
    target. fi-patch parses one file at a time. (Two venvs: one named twice is checked once.)"""
    first, second = venv_with("0.7.4"), venv_with("0.7.4")
    log = CliRunner(env={"VIRTUAL_ENV": None, "CONDA_PREFIX": None, "NO_COLOR": "1"})
    for _ in range(25):
        run = fi_patch(log, "check", "--venv", first, "--venv", second, "--json")
        assert run.code == ExitCode.NEEDS_APPLY, run.text
        assert [r["status"] for r in run.json["results"]] == ["error", "error"], run.text
        assert all(r["exit_code"] == ExitCode.NEEDS_APPLY for r in run.json["results"])


# --- 80 columns: a log (rich lays out 80) and a terminal of 80 -----------------------------------

ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
EIGHTY = [
    pytest.param({"COLUMNS": "80"}, id="piped"),
    pytest.param({"COLUMNS": "80", "FORCE_TERMINAL": "1", "TTY_COMPATIBLE": "1"}, id="terminal"),
]


def _at(environment: dict[str, str]) -> CliRunner:
    return CliRunner(env={"VIRTUAL_ENV": None, "CONDA_PREFIX": None, "NO_COLOR": "1"} | environment)


def _plain_lines(run: Run, *, stderr: bool = True) -> list[str]:
    return ESCAPE.sub("", run.stdout + (run.stderr if stderr else "")).splitlines()


def _uncut(lines: list[str], *, width: int | None = 80) -> None:
    """Nothing cut with an ellipsis, no line padded at its end, none wider than `width`."""
    for line in lines:
        assert "\u2026" not in line, line
        assert line == line.rstrip(), repr(line)
        if width is not None:
            assert len(line) <= width, line


@pytest.mark.parametrize("environment", EIGHTY)
def test_list_at_80_columns_holds_every_id_and_path_whole(environment: dict[str, str]) -> None:
    run = fi_patch(_at(environment), "list")
    assert run.code == ExitCode.OK
    lines = _plain_lines(run)
    _uncut(lines)
    for patch in load_patches():
        assert patch.id in lines, patch.id  # its own line: a heading to copy
        for path in {patch.target, *(s.target for s in patch.shapes if s.target)}:
            assert any(re.search(rf"(^|\s){re.escape(path)}($|\s)", line) for line in lines), path


def _paragraphs(lines: list[str]) -> list[list[str]]:
    """The help's prose: the lines after `Usage:` up to the first section, split at blank
    lines."""
    prose = lines[1 : next(i for i, line in enumerate(lines) if line.endswith(":") and i)]
    paragraphs: list[list[str]] = [[]]
    for line in prose:
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


@pytest.mark.parametrize("environment", EIGHTY)
@pytest.mark.parametrize(
    "command",
    [pytest.param((), id="fi-patch")]
    + [pytest.param((c,), id=c) for c in ("apply", "revert", "check", "list")],
)
def test_help_at_80_columns_is_wrapped_by_the_formatter(
    environment: dict[str, str], command: tuple[str, ...]
) -> None:
    """Each paragraph is filled to the width: no line ends where the next line's first word
    would have fitted (a hard line break in the help string, wrapped again, does)."""
    run = fi_patch(_at(environment), *command, "--help")
    assert run.code == ExitCode.OK
    lines = _plain_lines(run)
    _uncut(lines)
    paragraphs = _paragraphs(lines)
    assert paragraphs, run.stdout
    for paragraph in paragraphs:
        for line, following in itertools.pairwise(paragraph):
            word = following.split()[0]
            assert len(line) + 1 + len(word) > 80, f"{line!r} then {following!r}"


def test_an_option_without_its_value_shows_the_usage(runner: CliRunner) -> None:
    run = fi_patch(runner, "check", "--venv")
    assert run.code == ExitCode.USAGE
    assert "Option '--venv' requires an argument." in run.stderr
    assert "Usage: fi-patch check [OPTIONS]" in run.stderr


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(("check", "--venv", "--json"), id="venv-then-json"),
        pytest.param(("apply", "--python", "-q"), id="python-then-quiet"),
        pytest.param(("check", "--cuda-home", "--verbose"), id="cuda-home-then-verbose"),
        pytest.param(("check", "--venv", "--help"), id="venv-then-help"),
        pytest.param(("check", "--venv", "-qv"), id="venv-then-short-flags"),
        pytest.param(("apply", "--venv", "--timeout=3"), id="venv-then-option-with-value"),
    ],
)
def test_an_option_taken_as_a_paths_value_is_a_usage_error(
    runner: CliRunner, arguments: tuple[str, ...]
) -> None:
    """`check --venv --json` is --venv without its value, as `check --venv` is; not a refusal
    of an environment named --json (exit 5)."""
    run = fi_patch(runner, *arguments)
    assert run.code == ExitCode.USAGE, run.text
    assert run.stderr.startswith(f"Usage: fi-patch {arguments[0]} [OPTIONS]\n"), run.stderr
    assert f"{arguments[2]} looks like an option" in run.text
    assert f"give {arguments[1]} its" in run.text


def test_a_path_named_like_an_option_is_still_a_path(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that is there is taken, whatever its name: `--venv ./--json` names one (here
    not a Python environment, exit 5)."""
    (tmp_path / "--json").mkdir()
    monkeypatch.chdir(tmp_path)
    run = fi_patch(runner, "check", "--venv", "./--json")
    assert run.code == ExitCode.ENVIRONMENT, run.text
    assert "is not a Python environment" in run.text


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        pytest.param(("apply", "--patch", "nope"), "no patch named 'nope'", id="unknown-patch"),
        pytest.param(
            ("check", "--cuda-home", "/nonexistent"), "no such directory", id="cuda-home-missing"
        ),
        pytest.param(("apply", "--force", "--no-verify"), "--force", id="force-without-proofs"),
    ],
)
def test_fi_patchs_own_usage_errors_show_the_usage_too(
    runner: CliRunner, arguments: tuple[str, ...], error: str
) -> None:
    """Not only click's: a usage error fi-patch finds itself is headed by its command's usage
    line, and with --json it stays one document."""
    run = fi_patch(runner, *arguments)
    assert run.code == ExitCode.USAGE, run.text
    assert run.stderr.startswith(f"Usage: fi-patch {arguments[0]} [OPTIONS]\n"), run.stderr
    assert error in run.stderr
    as_json = fi_patch(runner, "--json", *arguments)
    assert as_json.code == ExitCode.USAGE and "Usage:" not in as_json.stdout + as_json.stderr
    assert json.loads(as_json.stdout)["error"]["kind"] == "UsageError"


@pytest.mark.parametrize("environment", EIGHTY)
def test_a_reason_naming_a_long_path_keeps_it_whole_at_80_columns(
    venv_with: MakeVenv, environment: dict[str, str]
) -> None:
    """A drifted file's reason names its absolute path, longer than a line here: the reason
    wraps around it, and the path stands whole on a line of its own, to copy."""
    venv = venv_with("0.7.4")
    only = ("--patch", "cuda-version-torch-first")
    applied = fi_patch(_at(environment), "apply", "--venv", venv, *only, "--no-verify")
    assert applied.code == ExitCode.OK, applied.text
    changed = target_file(venv)
    changed.write_bytes(changed.read_bytes() + b"# a line of the user's\n")
    assert len(str(changed)) > 80
    run = fi_patch(_at(environment), "check", "--venv", venv, *only)
    assert run.code == ExitCode.DRIFTED, run.text
    lines = _plain_lines(run, stderr=False)
    assert f"  {changed} changed since fi-patch wrote it" not in lines  # not cut, not folded
    assert f"  {changed}" in lines, run.stdout
    # The rest fits (the reason's "…" is its own: a sha256 shortened to 12 digits).
    assert [x for x in lines if len(x) > 80 and str(venv) not in x] == [], run.stdout
    assert [x for x in lines if x != x.rstrip()] == [], run.stdout


@pytest.mark.parametrize("environment", EIGHTY)
def test_check_at_80_columns_cuts_no_id_and_pads_no_row(
    venv_with: MakeVenv, environment: dict[str, str]
) -> None:
    """The state table names each file once, on its own line, with the patches that write it
    below; each patch's reason wraps between words. Nothing is cut, no line is wider than 80
    columns (a 45-character id included) and none ends in padding."""
    venv = venv_with("0.7.4")
    run = fi_patch(_at(environment), "check", "--venv", venv)
    assert run.code == ExitCode.NEEDS_APPLY, run.text
    # Not stderr: it holds the pre-flight's line, which names the interpreter's whole path (in a
    # terminal, the spinner's, which rich cuts to the width and erases when the work is done).
    lines = _plain_lines(run, stderr=False)
    # The environment's line names the venv's path, as long as pytest's temporary folder makes it.
    _uncut([line for line in lines if not line.startswith("environment ")])
    patches = {patch.id: patch for patch in load_patches()}
    header = next(i for i, line in enumerate(lines) if line.split() == ["patch", "state", "apply"])
    file, rows = "", 0
    for line in lines[header + 1 :]:
        if ": " in line:
            break  # the reasons, below the table
        if line.startswith("  "):
            assert file in patches[line.split()[0]].targets, (file, line)
            rows += 1
        else:
            file = line
    assert rows == len(patches), run.stdout
    for patch in patches:
        reasons = [x for x in lines if x.startswith(f"{patch}: ") and ": note: " not in x]
        assert len(reasons) == 1, patch
