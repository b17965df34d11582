"""declared-ops-custom and declared-ops-fake on real releases, on a CPU.

FlashInfer declares ops for its norms, rope, cascade merges, paged-KV append and packbits, and has
made every declaration a no-op since 2024. The two patches make the checked module-level ones real
ops in fi-patch's namespace, taken only while Dynamo traces. Here: the data the patch keeps (each
declaration's mutates_args against the launcher its op calls) is checked against the releases'
own archives, Python and csrc; and on 0.2.0.post1 (the oldest release that declares these
ops), 0.6.8.post1, 0.7.0 and 0.7.4, check, apply
with the proofs red before and green after, check again and revert run for real: every named
entry point the release has traces to one op, runs FlashInfer's own function eagerly without
dispatching one, and, for ops that return tensors, the fake gives what the entry point
allocates; the declarations left as they are are named with their reasons.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from fi_patcher.model import Declaration
from fi_patcher.registry import RegistryError, holds, parse_patch, placed
from tests.support.cli import fi_patch, patch_result
from tests.support.deps import CUDA_TORCH, shared, use
from tests.support.expected import PATCHES
from tests.support.releases import (
    DECLARED,
    DECLARED_FAKE,
    UTILS,
    release,
    released_csrc,
    released_files,
    released_text,
)
from tests.support.tiers import releases
from tests.support.venvs import create_venv, install, python_of, site_packages

DECLARATIONS = PATCHES[DECLARED].declarations

# Every release the data was read from: the first on the index, the 0.2.x releases before the
# stream left the launchers' parameters, a torch-extension sdist, the 0.6 and 0.7 lines.
READ = ["0.2.0.post1", "0.2.1", "0.2.3", "0.2.5", "0.4.0", "0.6.8.post1", "0.7.0", "0.7.4"]


def module_level_declarations(version: str) -> dict[str, tuple[tuple[str, ...], list[str]]]:
    """Each op declared at module level: its declared mutates_args and its parameters."""
    found: dict[str, tuple[tuple[str, ...], list[str]]] = {}
    for relpath, data in released_files(release(version)).items():
        if not relpath.endswith(".py") or b"register_custom_op" not in data:
            continue
        for node in ast.parse(data).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and isinstance(decorator.func, ast.Name)
                    and decorator.func.id == "register_custom_op"
                ):
                    name = ast.literal_eval(decorator.args[0])
                    (mutates,) = [k.value for k in decorator.keywords if k.arg == "mutates_args"]
                    declared = ast.literal_eval(mutates)
                    declared = (declared,) if isinstance(declared, str) else tuple(declared)
                    found[name] = (declared, [a.arg for a in node.args.args])
    return found


def launcher_parameters(version: str, launcher: str) -> list[str] | None:
    """The parameter names of `void NAME(...)` in the release's csrc file."""
    file, name = launcher.removeprefix("csrc/").split(" ")
    source = released_csrc(release(version)).get(file, "")
    match = re.search(rf"^void\s+{name}\s*\(([^)]*)\)", source, re.MULTILINE)
    if match is None:
        return None
    return [re.split(r"[\s&*]+", p.strip())[-1] for p in match.group(1).split(",") if p.strip()]


def rows(op: str, version: str) -> list[Declaration]:
    return [d for d in DECLARATIONS if d.op == op and holds(d.versions, version)]


@pytest.mark.parametrize("version", READ)
def test_each_checked_declaration_is_the_release_s_own(version: str) -> None:
    """What the patch keeps as data holds for the release: the declaration's mutates_args, the
    launcher's parameters, and the op parameters the kernel writes exist."""
    declared = module_level_declarations(version)
    checked = {d.op for d in DECLARATIONS}
    assert checked & set(declared), f"{version} declares none of {sorted(checked)}"
    for op in sorted(checked & set(declared)):
        mutates, parameters = declared[op]
        (row,) = rows(op, version) or [None]
        assert row is not None, f"{op} in {version}: no row of the patch holds this release"
        assert row.mutates == mutates, f"{op} in {version} declares {mutates}"
        launcher = launcher_parameters(version, row.launcher)
        assert launcher is not None, f"{version} has no launcher {row.launcher}"
        assert launcher[: len(row.parameters)] == list(row.parameters), (op, version, launcher)
        assert set(row.writes) <= set(parameters), f"{op} in {version} has {parameters}"


def test_the_placed_code_carries_the_checked_declarations() -> None:
    """The rendered map is what the rows say, and every row's op is one a proof names."""
    text = placed("declared_ops.py", DECLARATIONS)
    tree = ast.parse(text)
    (assignment,) = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "_fi_patch_checked"
    ]
    checked = ast.literal_eval(assignment.value)
    assert checked == {d.op: {d.mutates: d.placed} for d in DECLARATIONS}
    proof = (
        Path(__file__).parents[1] / "src/fi_patcher/in_target/proofs/declared_ops.py"
    ).read_text()
    assert all(f'"{op}"' in proof for op in checked)
    strings = [
        n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    assert all(n.lineno == n.end_lineno for n in strings), "a string spans lines"


# After the patch, the module's rmsnorm implementation is fi-patch's routing function, which
# calls FlashInfer's own function object eagerly (with its name, signature and attributes), and
# the op while compiling; and importing FlashInfer imports no Dynamo (which would cost every
# process seconds).
UNTOUCHED = """
import inspect, json, sys, torch, flashinfer, flashinfer.utils
entry = flashinfer.utils._fi_patch_declared["flashinfer::rmsnorm"]
module = sys.modules[entry.fn.__module__]
routed = getattr(module, entry.fn.__name__)
print(json.dumps({
    "routed": routed is entry.routed and routed.__name__ == entry.fn.__name__,
    "signature": inspect.signature(routed) == inspect.signature(entry.fn),
    "file": entry.fn.__code__.co_filename.rsplit("site-packages/", 1)[-1],
    "traced is the op": entry.traced is entry.op,
    "dynamo imported": "torch._dynamo" in sys.modules,
}))
"""

# rmsnorm_quant's op, its scale (Union[float, Tensor]) split in two.
SPLIT = """
import json, flashinfer.utils
entry = flashinfer.utils._fi_patch_declared["flashinfer::rmsnorm_quant"]
print(json.dumps({"ready": entry.ready, "schema": str(entry.op.default._schema)}))
"""


def in_target(venv: Path, code: str) -> dict[str, object]:
    completed = subprocess.run(
        [python_of(venv), "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return dict(json.loads(completed.stdout.strip().splitlines()[-1]))


# The oldest release that declares these ops (the first on the index), the first 0.6 release
# (rmsnorm_quant annotated to return a tensor: left as it is), the 0.6 line, the last release
# whose fp4 op forwards positionally, and the last release.
LIFECYCLE = ["0.2.0.post1", "0.6.0", "0.6.8.post1", "0.7.0", "0.7.4"]
BOTH = ("--patch", DECLARED, "--patch", DECLARED_FAKE)


@pytest.mark.parametrize("version", releases(LIFECYCLE, "0.6.8.post1"))
def test_check_apply_check_revert(runner: CliRunner, tmp_path: Path, version: str) -> None:
    venv = create_venv(tmp_path / "venv")
    install(venv, release(version))
    use(venv, shared(CUDA_TORCH))
    original = released_text(release(version), UTILS)

    before = fi_patch(runner, "check", "--venv", venv, *BOTH, "--json")
    assert before.code == ExitCode.NEEDS_APPLY, before.stdout
    assert patch_result(before.json, DECLARED)["state"] == "pristine"

    run = fi_patch(runner, "apply", "--venv", venv, *BOTH, "--json")
    assert run.code == ExitCode.OK, run.stdout
    custom = patch_result(run.json, DECLARED)["verification"]
    fake = patch_result(run.json, DECLARED_FAKE)["verification"]
    for proofs in (custom, fake):
        assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
        assert "has no _fi_patch_declared" in proofs["before"]["summary"]
    summary = custom["after"]["summary"]
    for name in ("rmsnorm", "fused_add_rmsnorm", "apply_rope_inplace", "merge_state_in_place"):
        assert f" {name}," in summary or f"({name}," in summary, summary
    assert "(merge_state, merge_states, packbits)" in fake["after"]["summary"]
    assert "the fakes' outputs as the eager calls allocate them" in fake["after"]["summary"]
    # Nothing is left silently: every declaration not made an op is named with its reason.
    notes = custom["after"]["details"]
    left = dict(line.split(" left as it is: ", 1) for line in notes if " left as it is: " in line)
    assert all(left.values()), custom
    old = version == "0.2.0.post1"
    if version == "0.6.0":
        # Annotated `-> torch.Tensor`, it returns None and writes out: torch makes no op of it,
        # and it stays as it is even with FlashInfer's fake declared (declared-ops-fake).
        assert "Cannot register autograd formula" in left["flashinfer::rmsnorm_quant"]
        assert "fused_add_rmsnorm_quant," in summary and " rmsnorm_quant," not in summary
    elif not old:
        # The quantising norms trace to one op each, with a float scale and (0.6.7 on, where it
        # is Union[float, Tensor], split in two) with a tensor one.
        assert "rmsnorm_quant, fused_add_rmsnorm_quant," in summary, summary
        assert not {"flashinfer::rmsnorm_quant", "flashinfer::fused_add_rmsnorm_quant"} & set(left)
        assert in_target(venv, SPLIT) == {
            "ready": True,
            "schema": "fi_patch_declared::rmsnorm_quant(Tensor(a0!) out, Tensor input, "
            "Tensor weight, Tensor? scale, float? scale_number, float eps, bool? enable_pdl) -> ()",
        }
    # FlashInfer's fake for the cos/sin-cache rope lacks `interleave` (0.2.0.post1's, with two
    # caches, has it): fi-patch's stands in.
    assert old or (
        "flashinfer::apply_rope_pos_ids_cos_sin_cache made an op: its declared fake takes other "
        "parameters: fi-patch's fake stands in" in notes
    )
    # The module-level declarations fi-patch has not checked are named (0.6.8 on has some).
    if not old:
        assert "fi-patch has not checked its mutates_args against the kernel" in left.values()
    after = fi_patch(runner, "check", "--venv", venv, *BOTH)
    assert after.code == ExitCode.OK, after.stdout
    if version == "0.7.4":
        assert in_target(venv, UNTOUCHED) == {
            "routed": True,
            "signature": True,
            "file": "flashinfer/norm/__init__.py",
            "traced is the op": True,
            "dynamo imported": False,
        }
        # check names what is left as it is, from the proof, with --verify -v.
        verified = fi_patch(runner, "check", "--venv", venv, *BOTH, "--verify", "-v")
        assert verified.code == ExitCode.OK, verified.stdout
        assert (
            "flashinfer::layernorm left as it is: fi-patch has not checked its mutates_args "
            "against the kernel" in verified.text
        )

    reverted = fi_patch(runner, "revert", "--venv", venv)
    assert reverted.code == ExitCode.OK, reverted.stdout
    assert (site_packages(venv) / UTILS).read_bytes() == original


def test_a_corrected_or_left_out_row_is_what_the_placed_code_carries() -> None:
    """The verdicts the data may give: `corrected` makes the op with what the kernel writes,
    `left-out` keeps the reason the target will show; a row whose verdict contradicts its own
    columns is refused when the registry loads."""
    row = DECLARATIONS[0]
    corrected = replace(row, mutates=row.writes[:1], verdict="corrected")
    left_out = replace(row, op="flashinfer::other", verdict="left-out", reason="reads its out")
    text = placed("declared_ops.py", [corrected, left_out])
    (assignment,) = [
        n
        for n in ast.parse(text).body
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "_fi_patch_checked"
    ]
    assert ast.literal_eval(assignment.value) == {
        row.op: {row.writes[:1]: row.writes},
        "flashinfer::other": {row.mutates: "reads its out"},
    }
    wrong = PATCH_TEXT.replace('verdict = "right"', 'verdict = "corrected"', 1)
    with pytest.raises(RegistryError, match="the verdict is right"):
        parse_patch("declared-ops-custom.toml", wrong)


PATCH_TEXT = (Path(__file__).parents[1] / "patches" / "declared-ops-custom.toml").read_text()
