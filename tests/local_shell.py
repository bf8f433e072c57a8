"""A shell command on a local cluster's node, for the end-to-end tests (``tests.local_shell``).

Every local-cluster test file ran its commands the same way: ``bash -c`` under ``timeout`` on the
node, a slightly longer deadline for the whole call, and the node, command and both outputs in the
failure message. This is that one helper.
"""

from __future__ import annotations

import shlex

from clusterforge.local import LocalCluster


def sh(lc: LocalCluster, node: str, script: str, timeout: float = 60, ok: bool = True) -> str:
    """``script``'s stdout on ``node``; with ``ok`` (the default) a non-zero exit fails the test."""
    p = lc.on(node, f"timeout {int(timeout)} bash -c {shlex.quote(script)}", timeout=timeout + 15)
    if ok:
        assert p.returncode == 0, f"{node}: {script}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return str(p.stdout)
