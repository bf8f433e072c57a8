"""Rules on where the controller's state lives (``slurm.state_storage``, ``state_save_location``).

StateSaveLocation holds every job, reservation and node state slurmctld knows; a controller that
starts on an empty folder has forgotten them all. On AWS the controller's root volume is deleted
with the instance (infra/head.py: ``delete_on_termination``), so the state must live on a volume
or file system that outlives it: a retained EBS volume (``ebs``) for one controller, a shared file
system of ``storage[]`` (``shared``) for a primary/backup pair, which must both read and write the
same folder (slurm.conf(5), 22.05: "The backup controller recovers state information from the
StateSaveLocation directory, which must be readable and writable from both the primary and backup
controllers").

Accounting's database is the other half of a controller's memory: ``sacct``'s job history is in
MariaDB. With ``ebs`` state and the database on the controller, its datadir moves to the volume
too (render/slurm.py ``mariadb_datadir``). A ``shared`` file system gets the state but never the
datadir: MySQL's reference manual (its page on multiple data directories) warns that NFS is the
speed bottleneck for a server's data and that no platform's NFS locking is reliable in every
situation, and each InnoDB commit waits for an fsync of its redo log, a round trip on a network
file system. So that spec gets a warning (``accounting-db-not-retained``) that points to a
database host of its own, never a datadir quietly moved onto the shared mount.
"""

from __future__ import annotations

from collections.abc import Iterator

from clusterforge.clusterspec.models import STATE_VOLUME_MOUNT, Cluster, EbsStateStorage, SharedStateStorage
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, rule

_EBS_FIX = (
    "set slurm.state_storage: {type: ebs} and slurm.state_save_location: "
    f"{STATE_VOLUME_MOUNT}/slurmctld (a retained EBS volume), or type: shared on a storage[] mount."
)


def under(path: str, mount: str) -> bool:
    """``path`` is strictly below ``mount`` (the mount's root is the file system's, not Slurm's)."""
    return path.startswith(mount.rstrip("/") + "/")


def state_mount(c: Cluster) -> str | None:
    """The mount the state lives on: the chosen storage's, or (no state_storage) a storage[] mount
    state_save_location happens to lie under; None for the controller's own disk."""
    st = c.slurm.state_storage
    if isinstance(st, EbsStateStorage):
        return STATE_VOLUME_MOUNT
    if isinstance(st, SharedStateStorage):
        return st.mount
    return next((s.mount for s in c.storage if under(c.slurm.state_save_location, s.mount)), None)


@rule
def state_storage(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    st = c.slurm.state_storage
    ctl = c.groups_with_role("controller")
    hosts = sum(g.node_count for g in ctl)
    loc = c.slurm.state_save_location
    if isinstance(st, SharedStateStorage):
        mounts = [s.mount for s in c.storage]
        if st.mount not in mounts:
            yield Finding(
                Level.ERROR, "state-storage-unknown-mount", "slurm.state_storage.mount", st.mount,
                "names no storage[] mount, so nothing shared is mounted there.",
                f"use the mount of a storage[] entry ({', '.join(mounts) or 'none defined: add one'}).",
            )
    if isinstance(st, EbsStateStorage) and not (len(ctl) == 1 and ctl[0].cloud is not None):
        yield Finding(
            Level.ERROR, "state-ebs-not-on-aws", "slurm.state_storage.type", st.type,
            "an EBS volume is created and attached on AWS only, and this cluster's controller is not a cloud "
            "instance.",
            "use type: shared on a storage[] mount, or remove slurm.state_storage (an on-prem controller's "
            "disk outlives it).",
        )
    mount = state_mount(c)
    if st is not None and mount is not None and not under(loc, mount):
        yield Finding(
            Level.ERROR, "state-outside-storage", "slurm.state_save_location", loc,
            f"is not below {mount}, where slurm.state_storage ({st.type}) keeps the state: slurmctld would "
            "write it to the controller's own disk.",
            f"set slurm.state_save_location: {mount.rstrip('/')}/slurmctld (or another folder below {mount}).",
        )
    if len(ctl) == 1 and hosts == 2:
        if isinstance(st, EbsStateStorage):
            yield Finding(
                Level.ERROR, "ha-state-not-shared", "slurm.state_storage.type", st.type,
                "two controllers must share StateSaveLocation, and an EBS volume is attached to one "
                "instance: the backup would take over with no state.",
                "use slurm.state_storage: {type: shared, mount: <a storage[] mount>} and a "
                "state_save_location below it (e.g. /fsx/slurm/state).",
            )
        elif mount is None:
            yield Finding(
                Level.ERROR, "ha-state-not-shared", "slurm.state_save_location", loc,
                "two controllers must share StateSaveLocation, or the backup takes over with stale state.",
                "set slurm.state_storage: {type: shared, mount: /fsx} and state_save_location below it "
                "(e.g. /fsx/slurm/state).",
            )
    if len(ctl) == 1 and ctl[0].cloud is not None and mount is None and c.aws is not None:
        db = " and accounting's MariaDB" if c.accounting.enabled and c.accounting.storage_host == "localhost" else ""
        yield Finding(
            Level.WARNING, "state-on-root-volume", "slurm.state_storage", None,
            f"the controller's state ({loc}){db} is on its root volume, which AWS deletes with the instance: "
            "a replaced controller starts with no jobs, reservations or node states.",
            _EBS_FIX,
        )


@rule
def accounting_database(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    """The job history must outlive the controller when its state does (see the module's doc)."""
    a = c.accounting
    st = c.slurm.state_storage
    ctl = c.groups_with_role("controller")
    hosts = [h for g in ctl for h in g.hostnames]
    if not (a.enabled and isinstance(st, SharedStateStorage)) or a.storage_host not in ("localhost", *hosts):
        return
    where = "the controller's" if a.storage_host == "localhost" else f"{a.storage_host}'s"
    lost = (
        "AWS deletes that root volume with the instance"
        if any(g.cloud is not None for g in ctl)
        else "a machine that replaces it starts with an empty one"
    )
    one_cloud = len(ctl) == 1 and ctl[0].cloud is not None and len(hosts) == 1
    yield Finding(
        Level.WARNING, "accounting-db-not-retained", "accounting.storage_host", a.storage_host,
        f"slurmdbd's MariaDB (the sacct job history) keeps its datadir on {where} own disk, and {lost}: "
        f"a replaced controller finds its jobs in {st.mount} but not their accounting history. The datadir "
        f"is not moved to {st.mount}: MySQL's manual advises against a data directory on NFS (file locking "
        "is not reliable there).",
        "set accounting.storage_host to a database server that is not a controller (the site's own MariaDB, "
        "or Amazon RDS for MariaDB on AWS), whose storage is kept and backed up"
        + (
            "; or, with this one controller, slurm.state_storage: {type: ebs} and state_save_location below "
            f"{STATE_VOLUME_MOUNT} (the datadir moves to that volume)."
            if one_cloud
            else "."
        ),
    )
