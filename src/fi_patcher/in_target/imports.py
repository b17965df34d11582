# Where a normal start imports packages from: run inside the target interpreter as
# `python -B imports.py NAME...`, deliberately WITHOUT -I, in fi-patch's own environment, so
# that PYTHONPATH and the user's site-packages count as they do when a server starts there.
#
# Standard library only; nothing is imported but the module finder: find_spec of a top-level
# package does not run it. The answer is framed JSON on stdout.
import importlib.util
import json
import os
import site
import sys

BEGIN = "<<<fi-patch-probe>>>"
END = "<<<fi-patch-probe-end>>>"

# Without -I, Python puts this script's folder first on sys.path (fi-patch's in_target/, or the
# private folder of a copy): what it holds must not answer for the target. The current folder
# takes its place, as for `python -c` and `python -m` (none with PYTHONSAFEPATH set).
if sys.path and sys.path[0]:
    if os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        sys.path[0] = ""


def where(name: str) -> "dict[str, object] | None":
    try:
        spec = importlib.util.find_spec(name)
    except Exception as exc:  # a broken .pth or package is reported, not raised
        return {"error": repr(exc)}
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    folder = os.path.realpath(locations[0] if locations else os.path.dirname(spec.origin or ""))
    parent = os.path.dirname(folder)
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if parent in [os.path.realpath(p) for p in entries]:
        via = "PYTHONPATH"
    elif user and parent == os.path.realpath(user):
        via = "the user's site-packages"
    else:
        via = "sys.path"
    return {"path": folder, "via": via}


answer = {name: where(name) for name in sys.argv[1:]}
sys.stdout.write("\n" + BEGIN + json.dumps(answer) + END + "\n")
