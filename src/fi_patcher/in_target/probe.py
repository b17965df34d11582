# The probe: run inside the target interpreter as `python -I -B probe.py`.
#
# Standard library only, and no syntax newer than Python 3.8, because it runs in whatever
# interpreter the target has. Not `-S`: from Python 3.11 on, `site` is what makes sys.prefix a
# venv's prefix. The target's .pth files therefore run, as they do when the server starts, so the
# answer is framed by markers: nothing else they print can be mistaken for it.
import json
import os
import site
import sys
import sysconfig

BEGIN = "<<<fi-patch-probe>>>"
END = "<<<fi-patch-probe-end>>>"


def site_packages() -> "list[str]":
    found: list[str] = []
    candidates: list[str | None] = []
    paths = sysconfig.get_paths()
    candidates.extend(paths.get(key) for key in ("purelib", "platlib"))
    try:
        candidates.extend(site.getsitepackages())
    except AttributeError:  # old virtualenv's own site module has no getsitepackages
        pass
    for path in candidates:
        if path and os.path.isdir(path):
            real = os.path.realpath(path)
            if real not in [os.path.realpath(p) for p in found]:
                found.append(path)
    # In the order a normal start searches them: the first copy of a package is the one
    # imported (a venv's own site-packages come before the base's).
    order = [os.path.realpath(p) for p in sys.path]

    def position(path: str) -> int:
        real = os.path.realpath(path)
        return order.index(real) if real in order else len(order)

    return sorted(found, key=position)


answer = {
    "executable": sys.executable,
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "version": "%d.%d.%d" % sys.version_info[:3],
    "site_packages": site_packages(),
    "base_executable": getattr(sys, "_base_executable", None),
}
sys.stdout.write("\n" + BEGIN + json.dumps(answer) + END + "\n")
