"""The suite's two tiers. `make test` runs every test not marked slow, `make test-slow` those that
are; CI (`.ci/run`) runs both.

Slow are the runs that repeat a life the fast tier already covers on another release or case
(the lifecycles of the op boundaries, the declared ops and the patches on every release, the
fakes of every fp4_quantize shape, the same interrupt by another signal, twice or in text, a
crash at another step, a verdict on more kinds of environment), and the long end-to-end runs
whose steps the fast tier checks one by one (the docs' commands, the Ansible playbook, the
Dockerfile recipe, the upgrade built from history, two environments sharing one base, a release
from the future, a migration, several targets at once, the wording for people, the GPU check
run from wheels). Each kind keeps at least one release or case in the fast tier.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

SLOW = pytest.mark.slow


def releases(versions: Iterable[str], *fast: str) -> list[object]:
    """The versions as parameters, every one but `fast` marked slow."""
    return [v if v in fast else pytest.param(v, marks=SLOW) for v in versions]
