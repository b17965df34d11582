"""fi-patch built as a wheel, the way pipx, uv tool and Ansible install it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(folder: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", folder, ROOT], check=True
    )
    (wheel,) = folder.glob("fi_patch-*.whl")
    return wheel
