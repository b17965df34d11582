#!/usr/bin/python
# An Ansible module for fi-patch: `fi-patch apply --json` on a host, with check mode (a dry run
# that says whether a write would happen) and diff mode (fi-patch's own unified diff).
# Ansible finds it in library/ beside the playbook.

from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: fi_patch
short_description: Apply fi-patch's FlashInfer patches to a Python environment, and prove them
description:
  - Runs C(fi-patch apply --json) on the target environment. In check mode it runs
    C(fi-patch apply --dry-run --json) instead, which writes nothing, and reports changed when a
    write would happen. In diff mode it returns fi-patch's unified diff of each file.
  - Fails with fi-patch's own message and remedy on any refusal or failed proof. A patch
    fi-patch leaves out (a CPU torch for get_cuda_version, a torch too old for a patch, or a
    function text fi-patch does not know, exit 16, while it applies every other) is reported
    as C(left-out) in C(actions) and in the warnings, and changes nothing.
options:
  fi_patch:
    description: The fi-patch executable on the host (fi-patch lives in an environment of its own).
    type: path
    default: /opt/fi-patch/bin/fi-patch
  venv:
    description: The target environment (a venv or conda prefix).
    type: path
    required: true
  patches:
    description: Patch ids to apply (C(--patch)); empty means every patch that applies.
    type: list
    elements: str
    default: []
  args:
    description: More arguments for C(fi-patch apply), for example C(--allow-mismatch).
    type: list
    elements: str
    default: []
"""

RETURN = r"""
actions:
  description: What fi-patch did (or would do, in check mode) with each patch, by patch id.
  type: dict
  returned: success
fi_patch:
  description: fi-patch's JSON document.
  type: dict
  returned: always
"""

WRITES = ("applied", "would-apply", "rewritten", "would-rewrite", "finished")
LEFT_OUT_UNKNOWN = 16
"""fi-patch applied every patch it knows and left out one whose function it does not know: done,
with that patch among the warnings."""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "fi_patch": {"type": "path", "default": "/opt/fi-patch/bin/fi-patch"},
            "venv": {"type": "path", "required": True},
            "patches": {"type": "list", "elements": "str", "default": []},
            "args": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    command = [params["fi_patch"], "apply", "--json", "--venv", params["venv"]]
    command += [word for patch in params["patches"] for word in ("--patch", patch)]
    command += params["args"]
    if module.check_mode:
        command.append("--dry-run")
    rc, out, err = module.run_command(command)
    try:
        document = json.loads(out)
    except ValueError:
        module.fail_json(msg=f"fi-patch printed no JSON (exit {rc})", rc=rc, stdout=out, stderr=err)
    # A usage error or a bug has no results; a target that failed is its one result.
    results = document.get("results") or [document]
    error = results[0].get("error")
    if rc not in (0, LEFT_OUT_UNKNOWN) or error:
        message = error["message"] if error else f"exit {rc}"
        remedy = f" Fix: {error['remedy']}" if error and error.get("remedy") else ""
        module.fail_json(msg=f"fi-patch exit {rc}: {message}.{remedy}", rc=rc, fi_patch=document)
    (result,) = results
    actions = {p["patch"]: p["action"] for p in result["patches"]}
    diff = [
        {"before_header": f["file"], "after_header": f["file"], "prepared": f["diff"]}
        for f in result["files"]
        if f.get("diff")
    ]
    summary = ", ".join(f"{patch} {action}" for patch, action in actions.items())
    for warning in result.get("warnings", []):
        module.warn(warning)
    module.exit_json(
        changed=any(action in WRITES for action in actions.values()),
        actions=actions,
        diff=diff,
        msg=f"{summary} ({params['venv']})",
        fi_patch=document,
    )


if __name__ == "__main__":
    main()
