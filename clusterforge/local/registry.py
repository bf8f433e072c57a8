"""The machine-wide record of which local cluster runs which slurmd node names.

Slurm's cgroup v1 plugin, as Debian builds it (``--enable-multiple-slurmd``), puts every job of a
node under ``/sys/fs/cgroup/<controller>/slurm_<NodeName>``, at the root of each hierarchy. That
path is the machine's: network and mount namespaces do not separate it, and no ``cgroup.conf``
option changes it. Two local clusters that both run a ``cpu-001`` would put their jobs in one
folder: job 5 of one and job 5 of the other in one freezer cgroup, where the end of either
signals both (proctrack/cgroup), and ``down`` of one removes the other's folders. So ``up``
records its compute nodes' names here and refuses a name another running local cluster holds.

One small JSON file per state folder under ``REGISTRY`` (on /run: gone with a reboot, as the
clusters are). ``down`` removes its entry; an entry whose state folder is gone (removed by hand)
is stale and dropped. A state folder left by a crashed ``up`` still holds its names: ``down``
is what frees them, as it frees the namespaces.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from clusterforge.local.layout import LocalError

REGISTRY = Path(os.environ.get("CLUSTERFORGE_LOCAL_REGISTRY", "/run/clusterforge/local-clusters"))


def _entry(state: Path) -> Path:
    key = hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:16]
    return REGISTRY / f"{key}.json"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Two `up`s side by side (CI runs two clusters at once) see each other's entries."""
    REGISTRY.mkdir(parents=True, exist_ok=True)
    with (REGISTRY / ".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def claim(state: Path, cluster: str, names: Iterable[str], source: str) -> None:
    """Record ``names`` (the nodes that run slurmd) for ``state``, which must exist already (a
    side-by-side ``claim`` drops entries without one); ``LocalError`` if another local cluster
    holds one of them. Safe to repeat (a re-run replaces the entry)."""
    mine = sorted(set(names))
    me = state.resolve()
    with _locked():
        for f in sorted(REGISTRY.glob("*.json")):
            try:
                d = json.loads(f.read_text())
                other = Path(d["state"])
                theirs = set(d["nodes"])
            except (OSError, ValueError, KeyError, TypeError):
                f.unlink(missing_ok=True)  # unreadable: written by nothing we know, holds nothing
                continue
            if other == me:
                continue
            if not other.is_dir():
                f.unlink(missing_ok=True)
                continue
            common = [n for n in mine if n in theirs]
            if common:
                raise LocalError(
                    f"node name(s) {', '.join(common)} are in use by local cluster {d.get('cluster', '?')} "
                    f"(state {other}, up from {d.get('source', '?')}): Slurm names its cgroup v1 folders "
                    "slurm_<node> machine-wide, so two local clusters with a node name in common would share "
                    f"their jobs' cgroups; run `clusterforge local down --state {other}` first, or give this "
                    "spec's nodes other names"
                )
        entry = _entry(state)
        tmp = entry.with_suffix(".tmp")
        tmp.write_text(json.dumps({"state": str(me), "cluster": cluster, "source": source, "nodes": mine}))
        os.replace(tmp, entry)


def holds(state: Path) -> bool:
    """True while ``state`` has claimed its node names."""
    return _entry(state).is_file()


def release(state: Path) -> bool:
    """Forget ``state``'s names (``down``); True if it had an entry."""
    entry = _entry(state)
    with _locked():
        had = entry.is_file()
        entry.unlink(missing_ok=True)
    return had
