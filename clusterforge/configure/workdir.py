"""Where a configure run keeps ansible-runner's private folder: in memory (tmpfs) when it has room.

ansible-runner turns every Ansible event into files: the playbook's callback writes the event to a
``-partial.json`` file (create, write, rename), and the runner process reads it back and writes
the final ``job_events/N-UUID.json``. The six-node re-run makes about 1,400 events, and the
callback runs in ansible-playbook's one controller thread, which every task of every host passes
through. On this kind of machine's ext4 a create-write-rename of such a file costs several times
what it costs on tmpfs (``benchmarks/event_files.py`` prints both and the ratio), so the folder
goes to ``/dev/shm`` when it can hold the run's events with room to spare, and to the system's
temporary folder otherwise.

tmpfs also keeps the values a run is handed as ``secrets`` (the 0600 vars file in the same folder)
off the disk. The folder is private (0700) and deleted when the run ends either way; kept
artifacts are moved (or, across file systems, copied) out of it first.

``CLUSTERFORGE_RUNNER_TMP`` names the parent folder outright (e.g. a disk when memory is short).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SHM = Path("/dev/shm")


class RunnerTmpError(ValueError):
    """``CLUSTERFORGE_RUNNER_TMP`` names no folder the run can use."""


# A host's events in one run: the six-node local cluster wrote 8.0 MB in its first run (1.3 MB a
# host); eight times that leaves room for chattier roles and for -v.
EVENT_BYTES_PER_HOST = 8 << 20
# left free in memory beyond the run's events
HEADROOM_BYTES = 512 << 20


def runner_parent(hosts: int, env: Mapping[str, str] = os.environ, shm: Path = SHM) -> Path | None:
    """The folder to create the run's private folder in; ``None`` means the system's default.

    ``hosts`` is the number of inventory hosts the run may touch (every node of the spec)."""
    override = env.get("CLUSTERFORGE_RUNNER_TMP")
    if override:
        chosen = Path(override)
        if not chosen.is_dir() or not os.access(chosen, os.W_OK | os.X_OK):
            raise RunnerTmpError(
                f"CLUSTERFORGE_RUNNER_TMP={override!r}: not a folder this user can write; "
                "create it, point the variable at one, or unset it (then /dev/shm or the temporary folder)"
            )
        return chosen
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    if not os.access(shm, os.W_OK | os.X_OK):
        return None
    free = st.f_bavail * st.f_frsize
    if free < max(hosts, 1) * EVENT_BYTES_PER_HOST + HEADROOM_BYTES:
        return None
    return shm
