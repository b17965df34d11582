"""The CUDA toolkit the server will use, where the user names it: `--cuda-home DIR`, or the
server's own environment read from a file (`--server-env FILE`, a systemd EnvironmentFile).

The pre-flight finds nvcc the way FlashInfer does, from CUDA_HOME, CUDA_PATH and PATH. Without
either option those are fi-patch's own variables, which a server started by systemd or by a
container's entrypoint may not share; with one, they are the server's (`ServerToolkit`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fi_patcher.errors import UsageError

VARIABLES = ("CUDA_HOME", "CUDA_PATH", "PATH")
"""The variables FlashInfer's get_cuda_path() reads to find nvcc, in its order."""

SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
"""The PATH systemd gives a service whose environment sets none (systemd.exec(5))."""


@dataclass(frozen=True)
class ServerToolkit:
    """The variables the server finds nvcc by, and where they were named."""

    variables: Mapping[str, str]
    """CUDA_HOME, CUDA_PATH and PATH as the server sees them; one left out is unset there."""
    origin: str
    """`--cuda-home`, or the file (`--server-env FILE`) the variables were read from."""
    path_default: bool = False
    """PATH is systemd's default: the file sets none."""

    def source(self, variable: str) -> str:
        """Where the pre-flight's nvcc came from, for people: the variable it was found by
        ($CUDA_HOME, $CUDA_PATH, PATH, `default folder`), in these variables."""
        if self.origin == "--cuda-home":
            return "--cuda-home"
        if variable == "PATH" and self.path_default:
            return f"PATH, systemd's default ({self.origin} sets none)"
        return f"{_named(variable)} in {self.origin}"


def own_source(variable: str) -> str:
    """The same, where the variables are fi-patch's own."""
    return f"{_named(variable)} in fi-patch's environment"


def _named(variable: str) -> str:
    if variable == "default folder":
        return "/usr/local/cuda, the default folder, for want of CUDA_HOME, CUDA_PATH or PATH"
    return variable.removeprefix("$")


def named(cuda_home_folder: Path | None, server_env_file: Path | None) -> ServerToolkit | None:
    """The toolkit --cuda-home or --server-env names, if either does; not both."""
    if cuda_home_folder is not None and server_env_file is not None:
        raise UsageError(
            "give --cuda-home or --server-env, not both",
            remedy="--server-env where the server's unit reads an environment file (its "
            "CUDA_HOME, CUDA_PATH and PATH count), --cuda-home to name the toolkit alone",
        )
    if cuda_home_folder is not None:
        return cuda_home(cuda_home_folder)
    return server_env(server_env_file) if server_env_file is not None else None


def cuda_home(folder: Path) -> ServerToolkit:
    """`--cuda-home DIR`: the toolkit in DIR, which must hold bin/nvcc."""
    home = Path(os.path.abspath(folder))
    if not home.is_dir():
        raise UsageError(
            f"--cuda-home {folder}: no such directory",
            remedy="name the toolkit's folder, the one that holds bin/nvcc (such as "
            "/usr/local/cuda-13.0), as the server's CUDA_HOME does",
        )
    nvcc = home / "bin" / "nvcc"
    if not (nvcc.is_file() and os.access(nvcc, os.X_OK)):
        raise UsageError(
            f"--cuda-home {folder}: {nvcc} is not there, or cannot be run",
            remedy="name the toolkit's folder, the one that holds bin/nvcc (such as "
            "/usr/local/cuda-13.0), not its bin/ or nvcc itself",
        )
    return ServerToolkit({"CUDA_HOME": str(home)}, "--cuda-home")


def server_env(file: Path) -> ServerToolkit:
    """`--server-env FILE`: the CUDA_HOME, CUDA_PATH and PATH the file sets; PATH is systemd's
    default where it sets none."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(
            f"--server-env {file}: cannot read it: {why}",
            remedy="name the file the server's unit reads (its EnvironmentFile=), readable by "
            "the user running fi-patch",
        ) from exc
    values = parse_environment(text, str(file))
    variables = {name: values[name] for name in VARIABLES if name in values}
    default = "PATH" not in variables
    if default:
        variables["PATH"] = SYSTEMD_PATH
    return ServerToolkit(variables, f"--server-env {file}", path_default=default)


_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)")


def parse_environment(text: str, name: str) -> dict[str, str]:
    """KEY=VALUE lines, as systemd reads an EnvironmentFile: blank lines and lines starting
    with # or ; are skipped, and a value may be quoted ('…', or "…" where \\ escapes). A line of
    another form is an error, not skipped: a misread file would judge the wrong toolkit."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        matched = _LINE.fullmatch(line)
        if matched is None:
            raise _malformed(name, number, "it is not KEY=VALUE")
        if line.endswith("\\"):
            raise _malformed(
                name, number, "it goes on on the next line (\\), which fi-patch does not read"
            )
        value = _value(matched.group(2).strip())
        if value is None:
            raise _malformed(name, number, "a quote is not closed")
        values[matched.group(1)] = value
    return values


def _value(raw: str) -> str | None:
    """A value without its quotes; None where a quote is left open."""
    if raw[:1] not in ("'", '"'):
        return raw
    quote = raw[0]
    if len(raw) < 2 or raw[-1] != quote:
        return None
    inner = raw[1:-1]
    return re.sub(r"\\(.)", r"\1", inner) if quote == '"' else inner


def _malformed(name: str, line: int, why: str) -> UsageError:
    return UsageError(
        f"--server-env {name}, line {line}: {why}",
        remedy="give a file of KEY=VALUE lines, as systemd's EnvironmentFile= reads them "
        "(# comments, values optionally quoted, no `export`)",
    )
