"""fi-patch built as a wheel, the way pipx, uv tool and Ansible install it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(folder: Path) -> Path:
    """The wheel, built the way `make dist` builds it (`python -m build`)."""
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", folder, ROOT],
        check=True,
        capture_output=True,
    )
    (wheel,) = folder.glob("fi_patch-*.whl")
    return wheel
