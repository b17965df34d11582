"""Stand-in CUDA toolkits: a folder whose bin/nvcc prints a release as `nvcc --version` does."""

from __future__ import annotations

from pathlib import Path


def toolkit(folder: Path, release: str) -> Path:
    """A stand-in CUDA toolkit whose nvcc reports `release`, as `nvcc --version` prints it."""
    nvcc = folder / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
        f"echo 'Cuda compilation tools, release {release}, V{release}.131'\n"
    )
    nvcc.chmod(0o755)
    return folder
