"""Entry point the Pulumi CLI runs for ``--policy-pack policy/``."""

import sys
from pathlib import Path

# The CLI runs this file with the pack folder as working directory; make `rules` importable
# (and `hardening`, `stateful`, `pack`) whether it is launched as a script or as part of the
# `policy` package.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pack import POLICIES
from pulumi_policy import EnforcementLevel, PolicyPack

PolicyPack(
    name="clusterforge-policies",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=list(POLICIES),
)
