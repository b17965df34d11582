"""Plain data shared by the modules: frozen, and free of I/O."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from packaging.specifiers import SpecifierSet

from fi_patcher.errors import FiPatchError


class State(enum.StrEnum):
    """What `check` says of one patch in one target. The values are the `--json` names."""

    NOT_INSTALLED = "not-installed"
    NOT_APPLICABLE = "not-applicable"
    PRISTINE = "pristine"
    PATCHED = "patched"
    WIPED = "wiped"
    HAND_PATCHED = "hand-patched"
    UNKNOWN = "unknown"
    """The file is FlashInfer's (RECORD's bytes), but the function's text is none fi-patch knows."""
    DRIFTED = "drifted"
    MISSING = "missing"
    """The patch's file is gone, although RECORD lists it, its release ships it or fi-patch
    patched it: a broken install."""
    LEFT_OUT = "left-out"
    """check: apply would leave the patch out, and says why (a torch too old for it, a CPU
    torch, a required patch left out): nothing for apply to do."""


Condition = Literal["original", "patched", "hand-patched", "drifted", "absent", "unrecorded"]
"""What one target file is (`FileState.condition`)."""
Command = Literal["apply", "revert"]
"""A command that writes: what a journal entry or a lock holder names."""
Mode = Literal["before", "after"]
"""A proof run on the unpatched code (a report) or on the patched code (the gate)."""
Verification = Literal["passed", "skipped", "pending"]
"""A written patch's proof: passed, skipped under --no-verify, or pending while it has not run
yet."""


# --- the registry -------------------------------------------------------------------------------


@dataclass(frozen=True)
class InsertFirst:
    """Insert statements as the first statements of the function (after its docstring), and,
    where `definitions` has them, module-level statements right after the function: the op the
    inserted branch routes to, say."""

    texts: Mapping[str, str]
    """The statements, at column 0, by name; each shape names the one it takes."""
    requires_names: tuple[str, ...]
    """Module-level names the inserted statements use; the module must already bind them."""
    definitions: Mapping[str, str] = field(default_factory=dict)
    """Module-level statements placed after the function, by the same names as `texts`; none
    where empty."""
    also_requires: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Names one text (by name) uses besides `requires_names`."""

    def names_for(self, text: str | None) -> tuple[str, ...]:
        """Every module-level name the statements of `text` use."""
        return (*self.requires_names, *self.also_requires.get(text or "", ()))

    kind = "insert-first"


@dataclass(frozen=True)
class KeywordArguments:
    """In the function's one call of `call`, pass every argument after the first `positional`
    by keyword, named after the variable passed (`x` becomes `x=x`)."""

    call: str
    positional: int

    kind = "keyword-arguments"


@dataclass(frozen=True)
class Boundary:
    """Leave the function as it is, and place one call of fi-patch's op boundary right after it
    (`fi_patcher/placed/op_boundary.py`, placed in flashinfer/utils.py by declared-ops-custom):
    the op `fi_patch::OP` made from the function's own signature, with the fake named `fake`
    under the rule the shape names (its `text`), and `fi_patch::OP_out` where the function
    writes into its parameter `out`. Dynamo traces a call of the op in the function's place."""

    op: str
    fake: str
    out: str = ""
    returns: int = 1
    """How many tensors the function returns."""
    check: str = ""
    """FlashInfer's own check of the problem, a function of the entry point's module, which the
    fake runs first; none where empty."""
    types: tuple[tuple[str, str], ...] = ()
    """The op's type (`Tensor`, `int`, `dtype`, `pair`, ...) of each parameter FlashInfer left
    unannotated, or annotated with a type no op schema holds (trtllm_batch_decode_with_kv_cache's
    `out`, a tensor or an FP4Tensor): a traced call that passes another kind traces the
    function's body."""
    returns_when: str = ""
    """The flag parameter without which the function returns its first output alone
    (`return_valid`); the op always returns all `returns`. None where empty."""
    only: tuple[tuple[str, str | bool], ...] = ()
    """The one value of each named parameter the op carries, where the function has it
    (`backend`: `cuda`, `do_finalize`: true): a traced call with another value traces the
    function's own body."""
    only_none: tuple[str, ...] = ()
    """The parameters the op carries as None only (`gemm1_lora_delta`: given, the routed MoE
    returns more outputs): a traced call that gives one traces the function's own body."""
    uncapturable: tuple[tuple[str, str], ...] = ()
    """The values that make a call's body one a CUDA graph cannot capture (`seed`: `none`, the
    generator read on the host; `check_nan`: `true`, a host sync): such a call is the op
    `fi_patch::OP_uncapturable`, tagged cudagraph_unsafe."""

    writes: tuple[str, ...] = ()
    """The parameters the function writes besides what it returns (concat_mla_k's `k`, which
    returns nothing: `returns = 0`; the trtllm MoE's `routing_replay_out`): its ops declare them
    written."""
    listed: bool = False
    """The function returns its outputs in a list (trtllm_fp4_block_scale_moe one,
    cutlass_fused_moe four): the op returns the tensors, and the routing function gives the list
    back; its out op returns those beside the out parameter, the list's first."""
    method: bool = False
    """The function is a method of the class the patch's `scope` names (run() of the batch
    attention wrappers): the call goes in the class body, rebinds the method and the class's
    `__init__` (which gives each wrapper its key), and the op carries the wrapper's key. The flag
    (`returns_when`) is passed on as given, and the op returns a list: the first output alone, or
    all `returns`."""
    aliases: tuple[tuple[str, int], ...] = ()
    """For a method: the class's other methods that set the wrapper's state and call it (the
    decode wrapper's deprecated `forward`, which SGLang calls, and `forward_return_lse`), each
    with how many outputs it returns: each gets an op of its own, whose body is that method,
    routed when the class's first wrapper is made (the class then holds them all)."""
    given: bool = False
    """The function's outputs are its parameters, given or not (trtllm_batch_decode_with_kv_cache's
    `out` and `lse`), as a method's are: the flag (`returns_when`, where the text has it) is passed
    on as given, the op returns a list, and a call that gives one output calls OP_out, which
    writes them all, those it asks for and does not give allocated in the graph first, as the
    fake gives them. No key."""

    UNCAPTURABLE = ("none", "true")

    kind = "op-boundary"

    def for_shape(self, shape: Shape) -> Boundary:
        """The boundary as `shape`'s texts take it: its own `returns` and `check`, where it
        names them."""
        return replace(
            self,
            returns=self.returns if shape.returns is None else shape.returns,
            check=self.check if shape.check is None else shape.check,
        )

    @staticmethod
    def _dict(pairs: tuple[tuple[str, str | bool], ...]) -> str:
        def text(value: str | bool) -> str:
            return repr(value) if isinstance(value, bool) else f'"{value}"'

        return "{" + ", ".join(f'"{name}": {text(value)}' for name, value in pairs) + "}"

    def _only(self) -> str:
        """`only` as placed: each value, then None for each of `only_none`."""
        pairs = [self._dict(self.only)[1:-1], *(f'"{name}": None' for name in self.only_none)]
        return "{" + ", ".join(p for p in pairs if p) + "}"

    @staticmethod
    def _tuple(names: tuple[str, ...]) -> str:
        return "(" + "".join(f'"{name}", ' for name in names).rstrip() + ")"

    def statements(self, function: str, rule: str) -> str:
        """The statements placed after `function`, for the shape's rule: at module level, or in
        the class body for a method."""
        if self.method:
            aliases = ", ".join(f'("{a}", {n})' for a, n in self.aliases)
            return (
                "from flashinfer import utils as _fi_patch_utils\n\n"
                'if hasattr(_fi_patch_utils, "_fi_patch_boundary_method"):\n'
                f"    {function}, __init__ = _fi_patch_utils._fi_patch_boundary_method(\n"
                f'        {function}, __init__, "{self.op}", fake="{self.fake}", rule="{rule}", '
                f'out="{self.out}", returns={self.returns}'
                + self._keywords()
                + (f",\n        aliases=({aliases},)" if self.aliases else "")
                + "\n    )\ndel _fi_patch_utils\n"
            )
        return (
            "from flashinfer import utils as _fi_patch_utils\n\n"
            'if hasattr(_fi_patch_utils, "_fi_patch_boundary"):\n'
            "    _fi_patch_utils._fi_patch_boundary(\n"
            f'        {function}, "{self.op}", fake="{self.fake}", rule="{rule}", '
            f'out="{self.out}", returns={self.returns}' + self._keywords() + "\n    )\n"
        )

    def _keywords(self) -> str:
        """The call's keyword arguments after `returns`, those that are not their default."""
        return (
            (f',\n        check="{self.check}"' if self.check else "")
            + (f",\n        types={self._dict(self.types)}" if self.types else "")
            + (f',\n        returns_when="{self.returns_when}"' if self.returns_when else "")
            + (f",\n        only={self._only()}" if self.only or self.only_none else "")
            + (
                f",\n        uncapturable={self._dict(self.uncapturable)}"
                if self.uncapturable
                else ""
            )
            + (f",\n        writes={self._tuple(self.writes)}" if self.writes else "")
            + (",\n        listed=True" if self.listed else "")
            + (",\n        given=True" if self.given else "")
        )


Operation = InsertFirst | KeywordArguments | Boundary


@dataclass(frozen=True)
class Shape:
    """One shape of the target function across a range of releases."""

    name: str
    versions: SpecifierSet
    function_sha256: frozenset[str]
    """sha256 of the exact source lines from the first decorator to the function's last line."""
    structure_sha256: str
    """sha256 of `ast.unparse` of the function node: formatting and comments do not count."""
    note: str
    text: str | None = None
    """For `InsertFirst`: the name of the statements this shape takes; for `Boundary`: the rule
    its fake follows."""
    target: str | None = None
    """The file, where these releases keep the function elsewhere than the patch's `target`."""
    returns: int | None = None
    """For `Boundary`: how many tensors these texts return, where not the patch's `returns`
    (cutlass_fused_moe before 0.3.0: the list of one its kernel module gives back)."""
    check: str | None = None
    """For `Boundary`: FlashInfer's check these texts call, where not the patch's `check`
    (cutlass_fused_moe before 0.3.0: `_check_shape_dtype_device`)."""


@dataclass(frozen=True)
class Exemption:
    """Where the patch has nothing to do, and why, told by the file itself: the file has no
    top-level function `absent`, or defines `defines`, or the patch's function is one of the
    already-fixed texts `function_sha256`. `versions` documents the releases where that is so,
    and is the cross-check."""

    versions: SpecifierSet
    reason: str
    absent: str | None = None
    defines: str | None = None
    function_sha256: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Case:
    """A real release, and what its files hold for a patch: a verdict, a shape where known, and
    why the case is worth keeping. tests/test_registry.py checks each against the release."""

    version: str
    verdict: str
    """known, not-applicable or unknown (`Verdict`'s values)."""
    shape: str | None
    why: str


@dataclass(frozen=True)
class Requirements:
    torch: SpecifierSet | None = None
    """The torch the target must have, for the code the patch writes or its proof."""
    patches: tuple[str, ...] = ()
    """Patches that must be in place first, wherever they apply (as the files tell)."""


@dataclass(frozen=True)
class Proof:
    """What proves the patch in the target: a script run there, and what it and the GPU script
    cover."""

    script: str
    """The file in `fi_patcher/in_target/proofs/`."""
    cpu: str
    gpu: str = ""


@dataclass(frozen=True)
class Patch:
    """A patch: which function of which file, how it is rewritten, the shapes it knows, what it
    requires, and what proves it."""

    id: str
    summary: str
    distribution: str
    target: str
    """The file, relative to site-packages, with forward slashes as RECORD writes it. A shape
    may name another (`Shape.target`); `identify.where` gives the patch placed at the file
    that holds its function."""
    function: str
    operation: Operation
    shapes: tuple[Shape, ...]
    not_applicable: tuple[Exemption, ...]
    proof: Proof
    requires: Requirements = field(default_factory=Requirements)
    preflight: tuple[str, ...] = ()
    """Named checks the pre-flight runs before this patch is written (`cuda-toolkit`)."""
    cases: tuple[Case, ...] = ()
    scope: str = ""
    """Where `function` is defined: top level (""); `else`, the else branch of a top-level `if`
    (flashinfer/utils.py's register_custom_op for torch >= 2.4); or the dotted path of the
    functions that hold it (`flashinfer_api.decorator`)."""
    declarations: tuple[Declaration, ...] = ()
    """FlashInfer's op declarations fi-patch checked against the kernel (declared-ops-custom)."""

    def marker(self, tool_version: str) -> str:
        return f"# fi-patch: {self.id} (fi-patch {tool_version})"

    @property
    def marker_prefix(self) -> str:
        return f"# fi-patch: {self.id} "

    def shape_named(self, name: str) -> Shape | None:
        return next((s for s in self.shapes if s.name == name), None)

    @property
    def targets(self) -> tuple[str, ...]:
        """Every file the patch may write, its own `target` first."""
        found = [self.target, *(s.target for s in self.shapes if s.target is not None)]
        return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class Declaration:
    """One of FlashInfer's op declarations, checked against what the release's kernel writes:
    `mutates` as FlashInfer declares it, the kernel's launcher and its parameters, the op
    parameters the kernel writes, and what fi-patch makes of it: `right` (the op declares what
    is written), `corrected` (the op declares `writes` instead) or `left-out` (`reason`)."""

    op: str
    versions: SpecifierSet
    """The releases whose declaration and launcher these are."""
    mutates: tuple[str, ...]
    launcher: str
    """`csrc/FILE NAME`: the file in the release's csrc and the launcher's name."""
    parameters: tuple[str, ...]
    """The launcher's first parameters, through the last one it writes."""
    writes: tuple[str, ...]
    verdict: str
    why: str
    """What the kernel was read to write."""
    reason: str = ""
    fake_why: str = ""
    """Where FlashInfer's declared fake is wrong, how: fi-patch's own fake for the op
    (placed/declared_ops.py, `_fi_patch_declared_fakes`) stands in for it."""

    VERDICTS = ("right", "corrected", "left-out")

    @property
    def placed(self) -> tuple[str, ...] | str:
        """What the op is made with: the mutated parameters, or why there is no op."""
        if self.verdict == "left-out":
            return self.reason
        return self.writes


@dataclass(frozen=True)
class PatchSet:
    """The patches a command works on, in registry order, and whether the user named them."""

    patches: tuple[Patch, ...]
    explicit: bool = False

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.patches)


class Verdict(enum.StrEnum):
    KNOWN = "known"
    """The function's text is a known shape's."""
    NOT_APPLICABLE = "not-applicable"
    UNKNOWN = "unknown"
    """A text fi-patch has never seen (or, for a version, one outside every range)."""


@dataclass(frozen=True)
class Fit:
    """What a patch finds in the installed files (`identify`), or what the version's ranges
    name (`registry.expected`): the shape, or why there is none."""

    verdict: Verdict
    shape: Shape | None
    reason: str
    note: str | None = None
    """Where the version's ranges name something else than the files hold: what they hold."""
    structural: Shape | None = None
    """For an unknown text: the known shape whose structure (`ast`, without comments, layout or
    docstring) it has, which `apply --force` may write."""
    hashes: tuple[str, str] | None = None
    """For an unknown text: (sha256 of its text, sha256 of its structure)."""
    found: FunctionSpan | None = None
    """For an unknown text: where the function is, for evidence."""


@dataclass(frozen=True)
class Judgement:
    """What the pre-flight lets through: warnings to show, the patches left out (by id, why) and
    those it refuses (by id, the refusal)."""

    warnings: tuple[str, ...] = ()
    left_out: Mapping[str, str] = field(default_factory=dict)
    refused: Mapping[str, FiPatchError] = field(default_factory=dict)


# --- the target environment ---------------------------------------------------------------------


@dataclass(frozen=True)
class Imported:
    """Where a normal start of the interpreter imports a package from, and what puts it there."""

    path: Path
    via: str
    """PYTHONPATH, the user's site-packages, or sys.path."""


@dataclass(frozen=True)
class Interpreter:
    """What the target's own interpreter said about itself."""

    python: Path
    prefix: Path
    base_prefix: Path
    python_version: str
    site_packages: tuple[Path, ...]
    """In the order the interpreter searches them."""
    base_python: Path | None = None
    """The interpreter a venv was made from (sys._base_executable)."""
    imports: Mapping[str, Imported] = field(default_factory=dict)
    """Where a normal start (not isolated) imports each package the patches touch."""
    normal_start: str | None = None
    """Why a normal start failed here, if it did."""

    @property
    def is_venv(self) -> bool:
        return self.prefix != self.base_prefix

    def owns(self, folder: Path) -> bool:
        """Whether `folder` lies inside this environment (not in the base a venv shares)."""
        return Path(os.path.realpath(folder)).is_relative_to(os.path.realpath(self.prefix))


@dataclass(frozen=True)
class Bytecode:
    """What the target's interpreter caches for one text of a file: a checked-hash .pyc (valid
    for exactly that text) and where the interpreter looks for it."""

    path: Path
    data: bytes


@dataclass(frozen=True)
class InstalledFile:
    site_packages: Path
    relpath: str
    record_sha256: str | None
    """Hex sha256 from the distribution's RECORD, when RECORD has one."""
    recorded: bool = True
    """Whether RECORD lists the file at all: fi-patch writes no file the installer did not."""

    @property
    def path(self) -> Path:
        return self.site_packages / self.relpath


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    dist_info: Path
    files: Mapping[str, InstalledFile]
    """The files the patches target, by relpath."""
    shadowed: tuple[Path, ...] = ()
    """Other copies' metadata folders, later on the path: the interpreter does not import them."""


# --- fi-patch's records -------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchRecord:
    """One patch fi-patch wrote into a file."""

    id: str
    shape: str
    fi_patch_version: str
    applied_at: str
    forced: bool = False
    verification: Verification = "skipped"
    torch_cuda: str | None = None
    nvcc_version: str | None = None
    nvcc_path: str | None = None
    mismatch_allowed: bool = False
    """Written although torch's CUDA and nvcc differ (--allow-mismatch)."""


@dataclass(frozen=True)
class Pending:
    """A write fi-patch started: the journal that lets the next command finish or undo it."""

    action: Command
    patches: tuple[PatchRecord, ...]
    """The patches the file holds once the write is done."""
    sha256: str
    """The bytes being written."""
    previous: str
    """The bytes before the write; a backup holds them."""


@dataclass(frozen=True)
class FileRecord:
    """A file fi-patch changed: its original, kept as a backup, and the patches it holds."""

    relpath: str
    site_packages: str
    """The site-packages folder, relative to the environment's prefix."""
    dist: str
    version: str
    record_sha256: str | None
    original: str
    """sha256 of FlashInfer's original bytes, which the backup holds."""
    backup: str
    """The backup's name inside the store's backups folder."""
    sha256: str
    """sha256 of the bytes fi-patch last finished writing."""
    patches: tuple[PatchRecord, ...] = ()
    pending: Pending | None = None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.patches)


@dataclass(frozen=True)
class Holder:
    """The fi-patch that holds an environment's lock: it is writing or proving right now."""

    pid: int
    command: str
    """apply or revert, as the lock file says (another fi-patch wrote it)."""
    since: str

    def describe(self) -> str:
        if not self.pid:
            return "another fi-patch"
        return f"fi-patch {self.command} (pid {self.pid}, since {self.since})"


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionSpan:
    """Where a function was found, for evidence in refusals."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class FileState:
    """What one target file is, decided from hashes and the (settled) record."""

    relpath: str
    path: Path
    condition: Condition
    """original, patched, hand-patched (the usual fix made by hand over the original) or
    drifted; absent or unrecorded (not in RECORD) for a broken install or a release outside
    every range."""
    reason: str
    sha256: str | None = None
    record: FileRecord | None = None
    """The manifest's record of the file, with any interrupted write settled."""
    interrupted: Command | None = None
    """When fi-patch was killed during one; the next command finishes it."""
    unproven: bool = False
    """The file holds bytes an interrupted apply wrote but never proved."""
    busy: Holder | None = None
    """The fi-patch whose write this is, still running: not an interrupted one."""
    found: FunctionSpan | None = None
    shapes: Mapping[str, Shape] = field(default_factory=dict)
    """The shape each patch's function has in the original, by patch id, where recognised."""
    upgraded: FileRecord | None = None
    """fi-patch's record of this file in a release installed before this one."""
    hand: tuple[str, ...] = ()
    """The patches someone made by hand (condition hand-patched)."""
    marked: tuple[str, ...] = ()
    """Of those, the ones that carry fi-patch's marker."""
    rebuilt: bytes | None = None
    """FlashInfer's original, rebuilt by taking the hand-made changes out (equal to RECORD)."""

    @property
    def applied(self) -> tuple[str, ...]:
        return self.record.ids if self.record is not None else ()


@dataclass(frozen=True)
class PatchState:
    """The state of one patch in one target, and what explains it."""

    patch: Patch
    state: State
    reason: str
    fit: Fit | None = None
    shape: Shape | None = None
    file: FileState | None = None

    @property
    def note(self) -> str | None:
        """What the version's ranges would have said otherwise (the files decide)."""
        return self.fit.note if self.fit is not None else None

    @property
    def forced(self) -> bool:
        """Written by `apply --force` over a text fi-patch did not know."""
        file = self.file
        if self.state is not State.PATCHED or file is None or file.record is None:
            return False
        return any(p.id == self.patch.id and p.forced for p in file.record.patches)

    @property
    def interrupted(self) -> Command | None:
        return self.file.interrupted if self.file is not None else None


@dataclass(frozen=True)
class Assessment:
    """One target: what is installed, and every selected patch's state, in registry order."""

    installed: Installed | None
    patches: tuple[PatchState, ...]
    files: Mapping[str, FileState]
    busy: Holder | None = None
    """A fi-patch writing or proving in this environment right now."""
    warnings: tuple[str, ...] = ()
    imported_instead: Imported | None = None
    """The copy a normal start imports, where it is not the one fi-patch works on."""
    applicable: frozenset[str] = frozenset()
    """The patches of the registry that apply here, told by the files (or in place already)."""
    none_found: bool = False
    """None of the patches' own files (`Patch.target`) exists: a layout fi-patch may not know."""
