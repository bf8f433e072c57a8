"""Rules on ``slurm.extra_conf``: the escape hatch may not weaken authentication or isolation.

The render prints extra_conf after its own settings, and slurm.conf takes the last value of a
key, so an extra_conf key replaces what the render chose. Most keys are the site's to tune; the
ones in ``GUARDED`` undo what the rest of the render relies on. slurm.conf keys are read without
regard to case (slurm.conf(5): "parameter names are case insensitive"), so they are compared in
lower case. Facts: the slurm.conf(5) man page of each release (22.05's is on this machine:
/usr/share/man/man5/slurm.conf.5.gz) and /work/shared/reference/facts.md section 3.2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, rule


def _items(v: str) -> list[str]:
    return [x.strip().lower() for x in v.split(",") if x.strip()]


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class Guard(NamedTuple):
    ok: Callable[[str, Cluster], bool]  # the value keeps what the render relies on
    why: str
    fix: str


def _enforces_associations(v: str, c: Cluster) -> bool:
    # slurm.conf(5): "If limits, qos, or wckeys are set, associations will automatically be set";
    # safe implies limits and associations; all is every flag
    return bool({"associations", "limits", "qos", "wckeys", "safe", "all"} & set(_items(v)))


def _render_enforces(c: Cluster) -> bool:
    # the render sets AccountingStorageEnforce=associations only with accounting on a CPU cluster
    # (render/slurm.py, "Accounting"); elsewhere the key is the site's
    return c.accounting.enabled


#: One row per guarded key (lower case): when the value is acceptable, why anything else weakens
#: the cluster, and what to do instead.
GUARDED: dict[str, Guard] = {
    "authtype": Guard(
        lambda v, c: v.strip().lower() in ("auth/munge", "auth/slurm"),
        "every message between Slurm's daemons and commands is authenticated by this plugin; the munge "
        "role installs MUNGE for auth/munge (auth/slurm, 23.11+, is Slurm's own); any other plugin "
        "leaves the daemons without the authentication they are deployed with",
        "remove slurm.extra_conf.AuthType (the render sets auth/munge).",
    ),
    "credtype": Guard(
        lambda v, c: v.strip().lower() in ("cred/munge", "cred/slurm"),
        "job step credentials are signed by this plugin, and slurmd trusts a step only through that "
        "signature; slurm.conf(5) (23.11, 24.11) knows two: cred/munge (the default) and cred/slurm",
        "remove slurm.extra_conf.CredType (the render sets cred/munge).",
    ),
    "authalttypes": Guard(
        lambda v, c: all(x == "auth/jwt" for x in _items(v)),
        "alternative authentication accepted by slurmctld next to AuthType; slurm.conf(5) knows only "
        "auth/jwt (slurmrestd's tokens, keyed by jwt_hs256.key in StateSaveLocation)",
        "use AuthAltTypes=auth/jwt or remove the key.",
    ),
    "slurmuser": Guard(
        lambda v, c: v.strip() != "root" and v.strip() != "0",
        "slurmctld and slurmdbd run as this user; slurm.conf(5): 'For security purposes, a user other "
        "than \"root\" is recommended': as root, any flaw in slurmctld is a root compromise of the controller",
        "remove slurm.extra_conf.SlurmUser (the render runs the daemons as the slurm user).",
    ),
    "slurmduser": Guard(
        lambda v, c: v.strip() in ("root", "0"),
        "slurmd must be root to start each job's processes as the job's user, to create its cgroups and "
        "to confine its devices; as another user jobs cannot start as their users and cgroup confinement "
        "is not set up",
        "use SlurmdUser=root (the default) or remove the key.",
    ),
    "proctracktype": Guard(
        lambda v, c: v.strip().lower() == "proctrack/cgroup",
        "slurm.conf(5): proctrack/linuxproc and proctrack/pgid 'can fail to identify all processes "
        "associated with a job since processes can become a child of the init process ... or change their "
        "process group': a job's daemonized process escapes the kill at its end and keeps the GPUs; "
        "PrologFlags=Contain (ssh adoption) needs proctrack/cgroup",
        "remove slurm.extra_conf.ProctrackType (the render sets proctrack/cgroup).",
    ),
    "taskplugin": Guard(
        lambda v, c: any(x in ("task/cgroup", "cgroup") for x in _items(v)),
        "cgroup.conf's ConstrainCores/ConstrainRAMSpace/ConstrainDevices are applied by task/cgroup; "
        "without it a job sees every core, all memory and every GPU of the node",
        "keep task/cgroup in the list (the render sets task/cgroup,task/affinity).",
    ),
    "accountingstorageenforce": Guard(
        lambda v, c: not _render_enforces(c) or _enforces_associations(v, c),
        "with accounting the cluster enforces associations: no job runs unless its user and account "
        "are known to slurmdbd; a value without associations (or limits/qos/wckeys/safe, which imply "
        "it) lets any user run without an account",
        "keep associations in the list, e.g. AccountingStorageEnforce=associations,limits.",
    ),
}


@rule
def extra_conf_weakens(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for key, value in sorted(c.slurm.extra_conf.items()):
        guard = GUARDED.get(key.lower())
        if guard is not None and not guard.ok(value, c):
            yield Finding(
                Level.ERROR, "extra-conf-weakens", f"slurm.extra_conf.{key}", value,
                f"{key}={value} weakens the cluster: {guard.why}.", guard.fix,
            )
