"""Rules on the paths the roles create, chown, format or mount: none may be a system folder.

Each path below reaches a task that changes the folder it names, so a system folder there
breaks or opens the host:

- ``slurm.state_save_location`` and the log folders: the slurm role creates them owned by
  SlurmUser (roles/slurm/tasks/config.yml), so ``/etc/slurm`` there would let the slurm user
  rewrite slurm.conf and the munge key's neighbours, and ``/`` or ``/var`` would hand it the host;
- ``SlurmdSpoolDir``: created (owned by root) on every compute node;
- ``storage[].mount``: a file system mounted over the folder hides what the OS keeps there;
- ``local_nvme_raid0``: formatted RAID0 scratch mounted there, mode 1777 (roles/storage/tasks/nvme.yml);
- ``health_checks.program``: the role writes the check script to that file, run by slurmd as root.

The extra_conf keys of these paths (``StateSaveLocation``, ``SlurmdSpoolDir``, the log files) are
checked too: the render prints extra_conf last, so its value is the one slurm.conf and the role's
manifest carry (render ``_layout``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from typing import Literal

from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, rule
from clusterforge.clusterspec.types import normal_path_problem

# the kernel's, the devices' and the boot loader's: no role has business below them at all
KERNEL_TREES = ("/proc", "/sys", "/dev", "/boot")
# the OS's own files: a folder or file at or below them is the OS's, never the cluster's
OS_TREES = ("/etc", "/usr", "/bin", "/sbin")
_LIB = re.compile(r"^/lib[^/]*(/|$)")  # /lib, /lib32, /lib64, /libx32 (merged-/usr symlinks or not)
# folders whose children are the cluster's to use (/var/spool/slurmctld, /home/slurm, /run/x),
# but which themselves hold everyone's: chowning, formatting or mounting over one breaks the host
SYSTEM_FOLDERS = frozenset(
    {"/", "/var", "/var/lib", "/var/log", "/var/spool", "/var/cache", "/var/tmp", "/run", "/root", "/home"}
)

Action = Literal["chown", "mount", "format", "file"]
_DOES = {
    "chown": "the slurm role creates this folder and gives it to the Slurm daemon's user",
    "mount": "the storage role mounts a file system over this folder, hiding what the host keeps there",
    "format": "the storage role formats the NVMe disks as RAID0 and mounts them here, mode 1777",
    "file": "the role writes the health check script to this file, run as root by slurmd",
}
_FIX = {
    "chown": "choose a folder of the cluster's own, e.g. /var/spool/slurmctld (or /fsx/slurm/state when shared).",
    "mount": "mount it on a folder of its own, e.g. /fsx, /shared or /datasets (/home only with purpose: [home]).",
    "format": "mount the NVMe scratch on a folder of its own, e.g. /scratch.",
    "file": "install the check under /usr/local/sbin or /opt, e.g. /usr/local/sbin/clusterforge-healthcheck.",
}

# slurm.conf keys whose value the role creates (a folder, or a log file's folder)
EXTRA_PATH_KEYS: dict[str, tuple[Action, bool]] = {  # lower-case key -> (action, the value's folder)
    "statesavelocation": ("chown", False),
    "slurmdspooldir": ("chown", False),
    "slurmctldlogfile": ("chown", True),
    "slurmdlogfile": ("chown", True),
}


def system_path_problem(path: str, action: Action) -> str | None:
    """Why ``path`` may not be the target of ``action``, or None."""
    for top in KERNEL_TREES:
        if path == top or path.startswith(top + "/"):
            return f"{top} belongs to the kernel or the boot loader; nothing of the cluster's goes there"
    # a file the role writes: under /usr/local (the default /usr/local/sbin/...) or /opt it is the
    # site's; anywhere else in the OS's trees it would overwrite a file of the OS's
    if action == "file" and path.startswith("/usr/local/"):
        return None
    for top in OS_TREES:
        if path == top or path.startswith(top + "/"):
            return f"{top} holds the OS's own files"
    if _LIB.match(path):
        return "/lib* holds the OS's libraries"
    if path in SYSTEM_FOLDERS:
        return f"{path} holds files of the whole host, not of one service"
    return None


def _targets(c: Cluster) -> Iterator[tuple[str, str, Action]]:
    yield "slurm.state_save_location", c.slurm.state_save_location, "chown"
    for i, s in enumerate(c.storage):
        if s.mount == "/home" and "home" in s.purpose:
            continue  # the users' home folders on shared storage: what /home is for
        yield f"storage[{i}].mount", s.mount, "mount"
    for i, g in enumerate(c.node_groups):
        if g.cloud is not None and g.cloud.local_nvme_raid0 is not None:
            yield f"node_groups[{i}].cloud.local_nvme_raid0", g.cloud.local_nvme_raid0, "format"
    if c.health_checks.enabled:
        yield "health_checks.program", c.health_checks.program, "file"


@rule
def system_paths(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for path, value, action in _targets(c):
        why = system_path_problem(value, action)
        if why is not None:
            yield Finding(
                Level.ERROR, "system-path", path, value, f"{_DOES[action]}, and {why}.", _FIX[action],
            )
    for key, value in sorted(c.slurm.extra_conf.items()):
        how = EXTRA_PATH_KEYS.get(key.lower())
        if how is None:
            continue
        action, parent = how
        path = f"slurm.extra_conf.{key}"
        bad = normal_path_problem(value)
        if bad is not None:
            yield Finding(
                Level.ERROR, "path-not-normal", path, value,
                f"the slurm role creates this path: {bad}.", "write an absolute, normalised path.",
            )
            continue
        folder = posixpath.dirname(value) if parent else value
        why = system_path_problem(folder, action)
        if why is not None:
            yield Finding(
                Level.ERROR, "system-path", path, value,
                f"{_DOES[action]}" + (f" ({folder}, the log file's folder)" if parent else "") + f", and {why}.",
                "choose a folder of the cluster's own (e.g. /var/spool/slurmd, /var/log/slurm/slurmd.log).",
            )
