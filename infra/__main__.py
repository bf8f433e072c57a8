"""Entry point of ``pulumi up`` / ``pulumi preview`` (Pulumi.yaml: ``main: infra/``).

Reads the spec path from stack config (``clusterforge:spec``), validates the spec through the
same pydantic model the CLI uses, reads the secrets the spec needs, builds the stack and exports
its outputs under the names in ``clusterforge.aws.outputs``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pulumi

# The project root (where Pulumi.yaml lives) must be importable for `infra.*`, and for
# `clusterforge` when it is not pip-installed into the stack's virtualenv.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from clusterforge.errors import ClusterforgeError  # noqa: E402
from clusterforge.resolve import resolve_file  # noqa: E402
from infra.program import deploy, required_secrets  # noqa: E402

config = pulumi.Config("clusterforge")
spec_path = Path(config.require("spec"))
if not spec_path.is_absolute():
    # Relative to the project root, whatever directory the language host runs us in.
    spec_path = ROOT / spec_path
try:
    # the same resolution and refusal as `clusterforge render`/`plan`: a spec with errors is not deployed
    rc = resolve_file(spec_path).require_valid("deployed")
except ClusterforgeError as exc:
    raise pulumi.RunError(str(exc)) from None

secrets = {name: config.require_secret(name) for name in required_secrets(rc.spec)}
for key, value in deploy(rc, secrets=secrets).items():
    pulumi.export(key, value)
