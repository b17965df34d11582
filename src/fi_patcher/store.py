"""fi-patch's records in the target environment, and every write fi-patch makes.

The store is `<prefix>/.fi-patch/`: `manifest.json`, `backups/<sha256>.py` (the original
bytes, named by their hash) and `lock`. It lies outside site-packages, so a reinstall of
FlashInfer leaves it alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fi_patcher.errors import StoreProblem, WriteFailed
from fi_patcher.model import ManifestEntry

SCHEMA = 1
STORE_DIR = ".fi-patch"
LOCK_TIMEOUT = 120.0
TEMPORARY_SUFFIX = ".fi-patch-tmp"
BACKUP_NAME = re.compile(r"[0-9a-f]{64}\.py")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Store:
    def __init__(self, prefix: Path) -> None:
        self.root = prefix / STORE_DIR
        self.manifest_path = self.root / "manifest.json"
        self.backups = self.root / "backups"

    # --- manifest ---

    def load(self) -> dict[str, ManifestEntry]:
        """Entries by patch id; empty when fi-patch never wrote here."""
        try:
            raw = self.manifest_path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreProblem(f"cannot read {self.manifest_path}: {exc.strerror}") from exc
        try:
            data = json.loads(raw)
            schema = data["schema"]
            if not isinstance(schema, int):
                raise TypeError("schema is not an integer")
            if schema > SCHEMA:
                raise StoreProblem(
                    f"{self.manifest_path} was written by a newer fi-patch (schema {schema}; "
                    f"this fi-patch reads {SCHEMA})",
                    remedy="upgrade fi-patch (pipx upgrade fi-patch) before touching this "
                    "environment",
                )
            return {e["patch_id"]: _entry(e) for e in data["entries"]}
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreProblem(
                f"{self.manifest_path} is corrupt: {exc!r}",
                remedy="inspect it by hand; the original bytes are still in "
                f"{self.backups}, named by their sha256",
            ) from exc

    def save(self, entries: dict[str, ManifestEntry]) -> None:
        data = {
            "schema": SCHEMA,
            "entries": [dataclasses.asdict(entries[k]) for k in sorted(entries)],
        }
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        self._make_root()
        atomic_write(self.manifest_path, text.encode("utf-8"), mode=0o600)

    # --- backups ---

    def put_backup(self, data: bytes) -> str:
        """Keep `data` under its own hash; return the backup's name."""
        name = f"{sha256_bytes(data)}.py"
        path = self.backups / name
        if path.exists() and sha256_bytes(path.read_bytes()) == sha256_bytes(data):
            return name
        self._make_root()
        self.backups.mkdir(mode=0o700, exist_ok=True)
        atomic_write(path, data, mode=0o600)
        return name

    def read_backup(self, entry: ManifestEntry) -> bytes:
        """The backup's bytes, after checking them against the manifest."""
        if not BACKUP_NAME.fullmatch(entry.backup):
            raise StoreProblem(
                f"the manifest names the backup {entry.backup!r}, which fi-patch never writes; "
                "refusing to read it"
            )
        path = self.backups / entry.backup
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise StoreProblem(
                f"the backup {path} is missing",
                remedy="reinstall FlashInfer to get the original back: "
                f"pip install --force-reinstall --no-deps {entry.dist}=={entry.version}",
            ) from exc
        if sha256_bytes(data) != entry.sha256_before:
            raise StoreProblem(
                f"the backup {path} does not match the manifest (sha256 "
                f"{sha256_bytes(data)[:12]}…, expected {entry.sha256_before[:12]}…); "
                "refusing to restore it",
                remedy="reinstall FlashInfer to get the original back: "
                f"pip install --force-reinstall --no-deps {entry.dist}=={entry.version}",
            )
        return data

    def drop_orphans(self, entries: dict[str, ManifestEntry]) -> None:
        """Delete backups no entry names: left by a run killed between backup and manifest."""
        if self.backups.is_dir():
            for path in self.backups.iterdir():
                if BACKUP_NAME.fullmatch(path.name):
                    self.drop_backup(path.name, entries)

    def drop_backup(self, name: str, entries: dict[str, ManifestEntry]) -> None:
        if all(e.backup != name for e in entries.values()):
            with contextlib.suppress(FileNotFoundError):
                (self.backups / Path(name).name).unlink()

    # --- lock ---

    @contextlib.contextmanager
    def lock(self, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        """Hold the environment's lock; wait for another fi-patch up to `timeout` seconds."""
        self._make_root()
        path = self.root / "lock"
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError as exc:
                    if time.monotonic() >= deadline:
                        raise WriteFailed(
                            f"another fi-patch has held {path} for {timeout:g} s",
                            remedy="wait for it to finish, then run this command again",
                        ) from exc
                    time.sleep(0.1)
            yield
        finally:
            os.close(descriptor)

    def _make_root(self) -> None:
        try:
            self.root.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise WriteFailed(
                f"cannot create fi-patch's folder {self.root}: {exc.strerror}",
                remedy="run fi-patch as the user who owns the environment",
            ) from exc


def _entry(data: dict[str, Any]) -> ManifestEntry:
    names = {f.name for f in dataclasses.fields(ManifestEntry)}
    return ManifestEntry(**{k: v for k, v in data.items() if k in names})


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write `data` to `path` through a new file in the same folder and `os.replace`.

    The result is a new inode: a hardlinked twin (uv links site-packages to its cache) keeps its
    bytes, and a reader sees either the old file or the new one, never half of either.
    """
    descriptor = -1
    temporary = ""
    try:
        descriptor, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX
        )
        with os.fdopen(descriptor, "wb") as handle:
            descriptor = -1
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
        temporary = ""
        _fsync_folder(path.parent)
    except OSError as exc:
        raise WriteFailed(
            f"cannot write {path}: {exc.strerror or exc}",
            remedy=_remedy(exc),
        ) from exc
    finally:
        if descriptor >= 0:
            os.close(descriptor)
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def clear_temporaries(path: Path) -> list[Path]:
    """Delete temporary files that a killed fi-patch left beside `path` (see `atomic_write`)."""
    removed = []
    for temporary in sorted(path.parent.glob(f".{path.name}.*{TEMPORARY_SUFFIX}")):
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
            removed.append(temporary)
    return removed


def clear_bytecode(source: Path) -> list[Path]:
    """Delete the cached bytecode of `source`, whatever its tag, optimisation level or mode.

    An unchecked-hash .pyc is never compared with its source, so without this an interpreter
    would keep running the old function.
    """
    removed = []
    for cached in sorted((source.parent / "__pycache__").glob(f"{source.stem}.*.pyc")):
        try:
            cached.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise WriteFailed(
                f"cannot delete stale bytecode {cached}: {exc.strerror}", remedy=_remedy(exc)
            ) from exc
        removed.append(cached)
    return removed


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remedy(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "free some disk space, then run the command again; nothing was changed"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "run fi-patch as the user who owns the environment (or make it writable)"
    return "fix the cause above, then run the command again"
