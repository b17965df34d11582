# The pre-flight: run inside the target interpreter as `python -I -B preflight.py [nvcc]`.
#
# Standard library only. It reads torch's version and torch.version.cuda from torch/version.py
# without importing torch (importing torch takes seconds and can fail for reasons the proofs
# report later). With `nvcc`, for the patches whose pre-flight compares the toolkit, it also finds
# the nvcc that FlashInfer would run, the way its get_cuda_path() and torch's CUDA_HOME do:
# $CUDA_HOME, $CUDA_PATH, the nvcc on PATH, then /usr/local/cuda. Those variables are this
# process's own, or, where an argument after `nvcc` gives them as a JSON object, the server's
# (fi-patch's --cuda-home, --server-env): a variable the object leaves out is unset there.
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

BEGIN = "<<<fi-patch-probe>>>"
END = "<<<fi-patch-probe-end>>>"


def torch_facts() -> "dict[str, object]":
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return {"found": False}
    path = os.path.join(os.path.dirname(spec.origin), "version.py")
    version_spec = importlib.util.spec_from_file_location("_fi_patch_torch_version", path)
    if version_spec is None or version_spec.loader is None:
        return {"found": True, "location": spec.origin, "error": "no torch/version.py"}
    module = importlib.util.module_from_spec(version_spec)
    try:
        version_spec.loader.exec_module(module)
    except Exception as exc:  # a broken torch/version.py is reported, not raised
        return {"found": True, "location": spec.origin, "error": repr(exc)}
    return {
        "found": True,
        "location": spec.origin,
        "version": getattr(module, "__version__", None),
        "cuda": getattr(module, "cuda", None),
    }


def nvcc_facts(environ: "dict[str, str]") -> "dict[str, object]":
    home = None
    source = None
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(variable):
            home, source = environ[variable], "$" + variable
            break
    if home is None:
        on_path = shutil.which("nvcc", path=environ.get("PATH", os.defpath))
        if on_path:
            home, source = os.path.dirname(os.path.dirname(on_path)), "PATH"
        elif os.path.exists("/usr/local/cuda"):
            home, source = "/usr/local/cuda", "default folder"
    if home is None:
        return {
            "found": False,
            "reason": "no CUDA_HOME or CUDA_PATH, no nvcc on PATH, no /usr/local/cuda",
        }
    nvcc = os.path.join(home, "bin/nvcc")
    facts = {"found": False, "path": nvcc, "source": source}
    try:
        text = subprocess.check_output([nvcc, "--version"], text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        facts["reason"] = "%s --version failed: %s" % (nvcc, exc)
        return facts
    matches = re.findall(r"release (\d+\.\d+),", text)
    if not matches:
        facts["reason"] = "cannot read a release from %s --version" % nvcc
        return facts
    facts.update(found=True, version=matches[0])
    return facts


answer = {"python": sys.executable, "torch": torch_facts()}
if "nvcc" in sys.argv[1:2]:
    given = sys.argv[2:3]
    answer["nvcc"] = nvcc_facts(json.loads(given[0]) if given else dict(os.environ))
sys.stdout.write("\n" + BEGIN + json.dumps(answer) + END + "\n")
