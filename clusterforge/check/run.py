"""The check's steps in order, under one deadline, with everything it started stopped at the end:
read the manifest, preflight (which release family's daemons), private copies, client-side
parse, munged, slurmd -G probes and slurmctld (``check_dir``)."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import time
from pathlib import Path

from clusterforge import hostlist, proc
from clusterforge.check import compare, environment, slurmd
from clusterforge.check.copies import SLURMD_FILE, make_copies, set_munge_socket, unreadable_slurm_files
from clusterforge.check.daemons import Daemons, rootfs_user
from clusterforge.check.report import CheckReport, ProblemKind
from clusterforge.check.slurmctld import Slurmctld
from clusterforge.render.manifest import MANIFEST_NAME, Manifest, ManifestError

__all__ = ["check_dir"]


class _Check:
    def __init__(self, path: Path, timeout_s: float, build_rootfs: bool) -> None:
        self.src = path
        self.build_rootfs = build_rootfs
        self.report = CheckReport(path=path)
        self.deadline = time.monotonic() + timeout_s
        self.tmp = Path(tempfile.mkdtemp(prefix="clusterforge-check-"))
        # mkdtemp makes 0700: the slurm user could not reach its state dir (local-cluster.md §1)
        self.tmp.chmod(0o755)
        self.started: list[proc.Daemon] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.hosts = self.tmp / "hosts"

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def timed(self, name: str, t0: float) -> None:
        self.report.timings[name] = round(time.monotonic() - t0, 3)

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            self._run()
        finally:
            for d in reversed(self.started):
                d.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.timed("total", t0)

    def load(self) -> Manifest | None:
        r = self.report
        try:
            manifest = Manifest.read(self.src)
        except ManifestError as exc:
            r.add(ProblemKind.MANIFEST, str(exc), MANIFEST_NAME)
            return None
        r.cluster = manifest.cluster
        bad = compare.bad_hostlists(manifest.expect)
        if not manifest.expect.controllers:
            bad.append("expect.controllers is empty: a render names at least one controller")
        if not (self.src / "slurm" / "slurm.conf").is_file():
            bad.append(f"{self.src / 'slurm' / 'slurm.conf'} is missing: render again")
        bad += unreadable_slurm_files(self.src, [f.name for f in manifest.files])
        for why in bad:
            r.add(ProblemKind.MANIFEST, why, MANIFEST_NAME)
        return None if bad else manifest

    def _run(self) -> None:
        r = self.report
        manifest = self.load()
        if manifest is None:
            return
        daemons = environment.preflight(r, manifest.slurm_version, self.tmp, build_rootfs=self.build_rootfs)
        if daemons is None:
            return
        r.slurm_version = manifest.slurm_version
        r.daemons = f"{daemons.version} ({daemons.where})"
        daemons.prepare()
        user = manifest.slurm.user
        pw = self.user(daemons, user)
        if pw is None:
            where = "this machine" if daemons.root is None else f"{daemons.root}/etc/passwd"
            r.add(ProblemKind.ENVIRONMENT, f"SlurmUser {user!r} (manifest slurm.user) does not exist on {where}")
            return
        nodes = environment.node_index(manifest)
        try:
            copies = make_copies(self.src, self.tmp, pw, r, nodes)
        except OSError as exc:
            r.add(ProblemKind.MANIFEST, f"cannot copy the render: {exc}", "slurm/")
            return
        expect = manifest.expect
        parse_warnings = self.client_parse(daemons, copies.parse, manifest)
        if parse_warnings is None:
            return
        if not self.munge(daemons, copies.ctld, copies.slurmd):
            return
        gpu_nodes = [node for node in expect.nodes if node.gpu_count > 0]
        environment.write_hosts(self.hosts, manifest, [slurmd.probe_node(node) for node in gpu_nodes], nodes)
        # slurmd -G needs no controller: run the probes while slurmctld starts (2-core CI box).
        probes = []
        for node in gpu_nodes:
            probe = slurmd.start_probe(
                node, daemons=daemons, tmp=self.tmp, hosts=self.hosts, conf=copies.slurmd, env=self.env
            )
            self.started.append(probe.daemon)
            probes.append(probe)
        ctld = Slurmctld(
            r, daemons, self.tmp, self.hosts, self.env, self.deadline, copies.accounting_off,
            manifest.config.block_sizes,
        )
        ctld_errors = ctld.run(copies.ctld, expect, self.started)
        for probe in probes:
            slurmd.finish_probe(r, probe, ctld_errors, self.deadline)
        # Client-side warnings are the same lines slurmctld logs; report only the ones it did not.
        for w in parse_warnings:
            if w.split("error: ", 1)[-1] not in ctld_errors:
                r.add(ProblemKind.PARSE, f"scontrol warns while parsing slurm.conf: {w}", "slurm.conf")

    @staticmethod
    def user(daemons: Daemons, name: str) -> pwd.struct_passwd | None:
        """The Slurm user as the daemons' own system has it (its uid owns the state folders)."""
        if daemons.root is not None:
            return rootfs_user(daemons.root, name)
        try:
            return pwd.getpwnam(name)
        except KeyError:
            return None

    def client_parse(self, daemons: Daemons, conf: Path, manifest: Manifest) -> list[str] | None:
        """Step 1: every Slurm client parses all of slurm.conf; unknown keys fail here in ms.
        Returns its warnings, or None when the parse failed (reported)."""
        t0 = time.monotonic()
        nodes = manifest.expect.nodes
        names = [n for node in nodes for n in compare.names(node.names)]
        arg = ",".join(node.names for node in nodes) or "localhost"
        try:
            cp = proc.run(
                daemons.isolated("scontrol", ["show", "hostnames", arg]),
                timeout=min(environment.CLIENT_TIMEOUT_S, self.remaining()),
                env=dict(self.env, SLURM_CONF=str(conf)),
            )
        except proc.ProcTimeout:
            self.report.add(ProblemKind.TIMEOUT, "scontrol show hostnames did not finish", "slurm.conf")
            return None
        except proc.ProcError as exc:
            self.report.add(ProblemKind.ENVIRONMENT, str(exc))
            return None
        finally:
            self.timed("parse", t0)
        err = cp.stderr.strip()
        if cp.returncode != 0:
            self.report.add(ProblemKind.PARSE, f"scontrol rejects slurm.conf (rc={cp.returncode}): {err}", "slurm.conf")
            return None
        got = cp.stdout.split()
        if names and got != names:
            self.report.add(
                ProblemKind.PARSE,
                f"Slurm expands the expected node names to {hostlist.compress(got)}, clusterforge to "
                f"{hostlist.compress(names)}",
                "slurm.conf",
            )
        return [ln.removeprefix("scontrol: ") for ln in err.splitlines() if ln.strip()]

    def munge(self, daemons: Daemons, ctld_conf: Path, slurmd_conf: Path) -> bool:
        """Use the host's munged if it answers, else a private one on its own socket and key."""
        t0 = time.monotonic()
        try:
            if environment.host_munged_answers(daemons, self.env, self.remaining()):
                return True
            daemon, sock = environment.start_munged(self.report, daemons, self.tmp / "munge", self.env, self.deadline)
            self.started.append(daemon)
            if sock is None:
                return False
            set_munge_socket(ctld_conf, sock, self.tmp, self.report)
            set_munge_socket(slurmd_conf, sock, self.tmp, self.report, SLURMD_FILE)
            return True
        finally:
            self.timed("munge", t0)


def check_dir(path: Path, *, timeout_s: float = 30, build_rootfs: bool = False) -> CheckReport:
    """Check a rendered output folder (``manifest.json`` + ``slurm/*.conf``) with the real daemons.

    ``timeout_s`` bounds all waiting together; stopping what was started takes at most a few
    seconds more. Never raises for a bad config or manifest: every finding is a ``Problem``.
    ``build_rootfs``: build the release family's root filesystem when it is missing (its own time
    limit, ``environment.ROOTFS_BUILD_TIMEOUT_S``, outside ``timeout_s``).
    """
    check = _Check(Path(path), timeout_s, build_rootfs)
    check.run()
    return check.report
