"""Prove a rendered Slurm config with the real daemons: ``clusterforge check DIR``.

Slurm has no config-test mode (local-cluster.md §1), so the check starts the real daemons on a
private copy of the rendered files and compares what they report with what the renderer meant,
read from ``manifest.json`` (the typed ``Manifest``: ``expect``, ``slurm``, ``config``):

1. client-side parse: ``scontrol show hostnames`` on the copy (unknown keys, bad numbers, bad enums);
2. a throw-away ``slurmctld -D -c`` in private UTS, mount and network namespaces; while it runs,
   ``scontrol show node/partition/topology/config`` are compared with ``expect`` and every
   ``error:``/``fatal:`` log line that is not known noise is a problem;
3. ``slurmd -G -N <first node>`` per GPU node line over fake GPU character devices: its parsed GRES
   (count, type, files) must equal ``expect``.

Modules, one job each:

* ``report``: ``ProblemKind``, ``Problem``, ``Override``, ``CheckReport``, ``format_report``;
* ``copies``: the private copies of the render (paths, log levels, Include, munge socket, JWT key,
  accounting) — the only reader of rendered config text outside ``clusterforge.render``;
* ``releases``: the release families (which Debian release's Slurm loads which target);
* ``daemons``: where the binaries come from (the host, or a family's cached root filesystem run
  chrooted over a private view in each daemon's mount namespace) and how each is started;
* ``environment``: root, the family's daemons (``preflight``), munged, the namespaces' /etc/hosts;
* ``slurmctld``: the controller in its namespaces and the ``scontrol`` queries;
* ``compare``: parsing ``scontrol`` output and comparing it with ``expect`` (pure);
* ``slurmd``: the ``slurmd -G`` probe with fake devices;
* ``run``: the steps in order under one deadline (``check_dir``).

Everything the check starts is a child of this process (``clusterforge.proc``), stopped by PID;
the namespaces, and the mounts in them, die with those children. Needs root, and either the
host's Debian ``slurmctld``/``slurmd``/``slurm-client``/``munge`` of the target's release family
or that family's root filesystem (``clusterforge/local/rootfs.sh CACHE SUITE slurm``).
"""

from __future__ import annotations

from clusterforge.check.releases import FAMILIES, Family, family_for
from clusterforge.check.report import CheckReport, GresDevice, Override, Problem, ProblemKind, format_report
from clusterforge.check.run import check_dir
from clusterforge.check.slurmctld import CTLD_NO_DBD_NOISE, CTLD_NOISE
from clusterforge.check.slurmd import SLURMD_NOISE

__all__ = [
    "CTLD_NOISE",
    "CTLD_NO_DBD_NOISE",
    "FAMILIES",
    "SLURMD_NOISE",
    "CheckReport",
    "Family",
    "GresDevice",
    "Override",
    "Problem",
    "ProblemKind",
    "check_dir",
    "family_for",
    "format_report",
]
