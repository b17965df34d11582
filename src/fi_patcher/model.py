"""Plain data shared by the modules: frozen, and free of I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet


class State(enum.StrEnum):
    """What `check` says of one target. The values are the `--json` names."""

    NOT_INSTALLED = "not-installed"
    NOT_APPLICABLE = "not-applicable"
    PRISTINE = "pristine"
    PATCHED = "patched"
    WIPED = "wiped"
    DRIFTED = "drifted"


# --- the registry -------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Patch:
    """A patch: which function of which file, what to insert, and the shapes it knows."""

    id: str
    summary: str
    distribution: str
    target: str
    """The file, relative to site-packages, with forward slashes as RECORD writes it."""
    function: str
    requires_names: tuple[str, ...]
    """Module-level names the inserted statements use; the module must already bind them."""
    insert: str
    """Statements inserted as the first statements of the function, at column 0."""
    shapes: tuple[Shape, ...]
    not_applicable: SpecifierSet
    not_applicable_reason: str

    def marker(self, tool_version: str) -> str:
        return f"# fi-patch: {self.id} (fi-patch {tool_version})"

    @property
    def marker_prefix(self) -> str:
        return f"# fi-patch: {self.id} "


class Verdict(enum.StrEnum):
    IN_RANGE = "in-range"
    NOT_APPLICABLE = "not-applicable"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Selection:
    """Which shape a version selects, and why (or why none)."""

    verdict: Verdict
    shape: Shape | None
    reason: str


# --- the target environment ---------------------------------------------------------------------


@dataclass(frozen=True)
class Interpreter:
    """What the target's own interpreter said about itself."""

    python: Path
    prefix: Path
    base_prefix: Path
    python_version: str
    site_packages: tuple[Path, ...]

    @property
    def is_venv(self) -> bool:
        return self.prefix != self.base_prefix


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
    file: InstalledFile


# --- fi-patch's records -------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestEntry:
    patch_id: str
    dist: str
    version: str
    shape: str
    relpath: str
    site_packages: str
    """The site-packages folder, relative to the environment's prefix."""
    sha256_before: str
    sha256_after: str
    record_sha256: str | None
    backup: str
    """The backup file's name inside the store's backups folder."""
    fi_patch_version: str
    applied_at: str
    forced: bool = False
    torch_cuda: str | None = None
    nvcc_version: str | None = None
    nvcc_path: str | None = None
    mismatch_allowed: bool = False
    """fi-patch wrote the patch although torch's CUDA and nvcc differ (--allow-mismatch)."""
    verification: str = "skipped"
    """pending while apply verifies, then passed; skipped under --no-verify."""
    status: str = "applied"
    """applying while apply writes and verifies, reverting while revert writes, else applied.
    Anything but applied, found by the next command, means that fi-patch was interrupted."""


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionSpan:
    """Where the target function was found, for evidence in refusals."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Assessment:
    """The state of one target and everything needed to act on it or explain it."""

    state: State
    reason: str
    patch: Patch
    installed: Installed | None = None
    selection: Selection | None = None
    shape: Shape | None = None
    sha256: str | None = None
    found: FunctionSpan | None = None
    patched_text: str | None = None
    """The text `apply` would write: set for pristine and wiped targets, and for forced ones."""
    entry: ManifestEntry | None = None
    interrupted: str | None = None
    """"apply" or "revert" when fi-patch was killed during one; the next command finishes it."""
