"""Step 2 of the check: a throw-away ``slurmctld -D -c`` on the private copy, in private UTS,
mount and network namespaces, and the ``scontrol`` queries compared with ``expect``.

The namespace's hostname is the expected primary controller (slurmctld refuses to run elsewhere),
its ``/etc/hosts`` (bind-mounted) resolves the controllers and every node, and its loopback
carries every IPv4 address (``local 0.0.0.0/0 dev lo``: whatever address slurm.conf gives the
controller, ``scontrol`` reaches the slurmctld listening on all addresses) plus the expected
controller addresses. slurmctld either runs as primary controller or exits (= rejected); while it
runs, ``scontrol show node/partition/topology/config`` are compared with the manifest's
``expect`` and every ``error:``/``fatal:`` log line that is not known noise is a problem.
"""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from clusterforge import hostlist, proc
from clusterforge.check import compare
from clusterforge.check.daemons import Daemons
from clusterforge.check.releases import release_of
from clusterforge.check.report import CheckReport, ProblemKind
from clusterforge.render.manifest import Expect

__all__ = [
    "CTLD_BACKUP_NOISE",
    "CTLD_NOISE",
    "CTLD_NO_DBD_NOISE",
    "NS_READY",
    "Slurmctld",
    "backup_addresses",
    "node_routes",
    "noise",
    "out_of_threads_message",
]

# error:/fatal: lines from slurmctld that say nothing about the config under test. Each entry is
# (regex, why). Keep it short: every entry is a class of real errors the check can no longer see.
CTLD_NOISE: tuple[tuple[str, str], ...] = (
    (r"mpi/pmix|MPI: Cannot create context", "Debian's slurm-wlm cannot load libpmix; logged on every start"),
    (
        r"High latency for \d+ calls to gettimeofday",
        "slurmctld times 1000 gettimeofday() calls at start (controller.c); a loaded machine trips it",
    ),
    (r"Configured MailProg is invalid", "the production MailProg (/usr/bin/mail) is not installed here"),
    (
        r"Could not open (job|reservation|node|trigger|assoc\w*|qos|resv|fed\w*) state file"
        r"|NOTE: Trying backup state save file|No (job|reservation) state file",
        "the check starts from an empty state directory (slurmctld -c)",
    ),
)
# Only when the check turned accounting off (no slurmdbd runs during the check).
CTLD_NO_DBD_NOISE: tuple[tuple[str, str], ...] = (
    (
        r"Job accounting information gathered, but not stored"
        r"|Even though we are collecting accounting information",
        "the check stores no accounting: JobAcctGatherType without AccountingStorageType",
    ),
)

# Only with a backup controller (a second SlurmctldHost), which never runs during the check.
CTLD_BACKUP_NOISE: tuple[tuple[str, str], ...] = (
    (
        r"_shutdown_bu_thread|_ping_backup|backup controller .* not responding",
        "a primary tells its backup to stand down at start and pings it; the check runs no backup",
    ),
)

NS_READY = "clusterforge-check: namespace ready"
_PRIMARY = "Running as primary controller"
_NOT_CONTROLLER = "not a valid controller"
_OUT_OF_THREADS = "pthread_create error"
_ERRORISH = re.compile(r"\b(error|fatal):", re.IGNORECASE)
STAND_IN_ADDR = "192.0.2.1"  # TEST-NET-1 (RFC 5737): never a real host; see Slurmctld.run()
# slurmctld saves its state on SIGTERM and notices the signal only between 1 s background ticks;
# the state is thrown away, so it gets less time before SIGKILL.
_CTLD_GRACE_S = 1.0
TOPOLOGY_YAML = (25, 5)  # slurmctld reads topology.yaml (and scontrol has show topoconf) from 25.05
_GRACE_S = 2.0
_QUERIES: dict[str, list[str]] = {
    "node": ["show", "node", "-o"],
    "partition": ["show", "partition", "-o"],
    "topology": ["show", "topology"],
    "config": ["show", "config"],
}


def backup_addresses(expect: Expect) -> list[str]:
    """The IPv4 address of each backup controller in the check's namespace: its expected address,
    or the loopback one ``environment.write_hosts`` gives a controller without one."""
    primary = expect.controller.name
    out = []
    for i, c in enumerate(expect.controllers):
        if i == 0 or c.name == primary:
            continue
        addr = c.address or f"127.0.0.{i + 1}"
        if ":" not in addr and addr not in out:
            out.append(addr)
    return out


def node_routes(expect: Expect) -> list[str]:
    """``ip -batch`` lines that make every node address of the check unreachable in slurmctld's
    namespace, except a controller's own.

    After its start slurmctld asks every node to register, through its forwarding tree. A branch
    whose head does not answer is abandoned: one thread per node of the branch
    (``_fwd_tree_thread``, src/common/forward.c @ slurm-22-05-8-1), and each thread retries a
    refused connect once a second for up to ``MessageTimeout`` (``slurm_send_addr_recv_msgs``,
    src/common/slurm_protocol_api.c). With every node address local, each connect was refused, so
    each of those threads lived up to 10 s. An unreachable route fails the connect with
    EHOSTUNREACH, which Slurm does not retry: at 65,536 nodes the peak fell from 65,498 to 50,991
    threads (limits raised to measure it). That is still above what a process gets under the
    default ``vm.max_map_count`` (about 32,765 threads), so running out is reported as the host's
    limit (``out_of_threads_message``), not as a config error."""
    from clusterforge.check.environment import node_networks  # environment imports this module

    nets = node_networks()
    batch = [f"route add unreachable {n} table local" for n in nets]
    primary = expect.controller
    if primary.address and ":" not in primary.address:
        addr = ipaddress.IPv4Address(primary.address)
        if any(addr in n for n in nets):  # the controller listens there: keep it local
            batch.append(f"route add local {addr}/32 dev lo table local")
    return batch


def out_of_threads_message(expect: Expect) -> str:
    """Why slurmctld died of ``pthread_create`` in the check, and how to let it run."""
    from clusterforge.check.environment import thread_ceiling  # environment imports this module

    ceiling, limits = thread_ceiling()
    return (
        f"slurmctld ran out of threads ({_OUT_OF_THREADS}): this host allows a process about {ceiling:,} "
        f"threads ({limits}). In the check no slurmd answers, and slurmctld asks every node to register "
        "after its start with one thread per node that does not answer (src/common/forward.c, "
        f'"Abandon tree"), so a check of {expect_node_count(expect):,} nodes can need as many. The config '
        "was not judged by that step. Raise the ceiling while checking: sysctl -w "
        "vm.max_map_count=262144 kernel.pid_max=4194304 (systemd's own pid_max default)"
    )


def expect_node_count(expect: Expect) -> int:
    return len({name for n in expect.nodes for name in hostlist.expand(n.names)})


def noise(line: str, patterns: Iterable[tuple[str, str]]) -> bool:
    return any(re.search(rx, line) for rx, _ in patterns)


@dataclass
class Slurmctld:
    """One run of slurmctld for one check, of the release ``daemons`` says."""

    report: CheckReport
    daemons: Daemons
    tmp: Path
    hosts: Path
    env: Mapping[str, str]
    deadline: float
    accounting_off: bool
    block_sizes: tuple[int, ...] = ()  # the manifest's BlockSizes (config.block_sizes)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def timed(self, name: str, t0: float) -> None:
        self.report.timings[name] = round(time.monotonic() - t0, 3)

    def run(self, conf: Path, expect: Expect, started: list[proc.Daemon]) -> set[str]:
        """Start, query, stop; returns the messages of the error lines slurmctld logged (for
        de-duplication against slurmd's and the client parse's copies of them)."""
        r = self.report
        # glibc's getaddrinfo(AI_ADDRCONFIG), which Slurm uses, finds nothing at all in a namespace
        # that has only loopback addresses: a documentation address (RFC 5737) on lo fixes that.
        batch = ["link set lo up", f"addr add {STAND_IN_ADDR}/32 dev lo", "route add local 0.0.0.0/0 dev lo"]
        for c in expect.controllers:
            if c.address and ":" in c.address:  # the IPv4 route above covers every IPv4 address
                batch.append(f"addr add {c.address}/128 dev lo")
        # Every IPv4 address is local here, so a primary's stand-down RPC to its backup would reach
        # the primary itself and tie up its RPC threads (scontrol then times out): each backup's
        # address is made unreachable instead, and the primary logs one error and goes on.
        batch += [f"route add unreachable {a}/32 table local" for a in backup_addresses(expect)]
        batch += node_routes(expect)
        ipb = self.tmp / "ip.batch"
        ipb.write_text("\n".join(batch) + "\n")
        d = self.daemons
        script = (
            d.mounts(self.hosts)
            + f'hostname "$1" && ip -batch "$2" && echo "{NS_READY}" && '
            + d.exec("slurmctld")
            + ' -D -c -f "$3"'
        )
        argv = [d.tools["unshare"], "--uts", "--mount", "--net", "--", "sh", "-c", script, "sh"]
        argv += [expect.controller.name, str(ipb), str(conf)]
        env = dict(self.env, SLURM_CONF=str(conf))
        t0 = time.monotonic()
        daemon = proc.start(argv, env=env)
        started.append(daemon)
        exited = False
        try:
            hit = daemon.lines.wait_for(lambda ln: _PRIMARY in ln or "fatal:" in ln, self.deadline)
            self.timed("slurmctld_start", t0)
            cpu = daemon.cpu_seconds()  # its own work to that line, however loaded the machine is
            if cpu is not None:
                r.timings["slurmctld_start_cpu"] = round(cpu, 3)
            if hit is not None and _PRIMARY in hit and daemon.alive():
                t1 = time.monotonic()
                self.query(daemon.pid, env, expect)
                self.timed("scontrol", t1)
            else:
                # A rejected config exits by itself right after its fatal line: let it.
                exited = daemon.wait_exit(min(_GRACE_S, max(self.remaining(), 0.1)))
        finally:
            t2 = time.monotonic()
            daemon.stop(_CTLD_GRACE_S)
            lines = daemon.lines.join(_GRACE_S)
            self.timed("slurmctld_stop", t2)
        r.slurmctld_log = lines
        return self.judge(lines, expect, exited, daemon.returncode)

    def judge(self, lines: list[str], expect: Expect, exited: bool, returncode: int | None) -> set[str]:
        """Problems from slurmctld's output (``lines``, from the namespace's first line); returns
        the messages of its error lines (see ``run``)."""
        r = self.report
        if NS_READY not in lines:
            r.add(ProblemKind.ENVIRONMENT, "namespace setup for slurmctld failed: " + " | ".join(lines[-5:]))
            return set()
        lines = lines[lines.index(NS_READY) + 1 :]
        patterns = CTLD_NOISE + (CTLD_NO_DBD_NOISE if self.accounting_off else ())
        if len(expect.controllers) > 1:
            patterns += CTLD_BACKUP_NOISE
        errors = [ln.removeprefix("slurmctld: ") for ln in lines if _ERRORISH.search(ln) and not noise(ln, patterns)]
        if any(_OUT_OF_THREADS in e for e in errors):
            # not the config's fault: the host's thread ceiling, met because no node answers here
            errors = [e for e in errors if _OUT_OF_THREADS not in e]
            r.add(ProblemKind.ENVIRONMENT, out_of_threads_message(expect), "slurmctld")
            if not any(_PRIMARY in ln for ln in lines):
                return {e.split("error: ", 1)[-1] for e in errors}
        messages = {e.split("error: ", 1)[-1] for e in errors}
        if not any(_PRIMARY in ln for ln in lines):
            why = " | ".join(errors[-6:]) or " | ".join(lines[-4:])
            if exited or any("fatal:" in ln for ln in lines):
                r.add(ProblemKind.REJECTED, f"slurmctld exited (rc={returncode}): {why}", "slurmctld")
                if any(_NOT_CONTROLLER in ln for ln in lines):
                    r.add(
                        ProblemKind.CONTROLLER_MISMATCH,
                        f"slurm.conf's SlurmctldHost is not {expect.controller.name}, the controller expect names",
                    )
            else:
                r.add(ProblemKind.TIMEOUT, f"slurmctld did not become primary controller in time: {why}")
            return messages
        for e in errors:
            r.add(ProblemKind.LOG_ERROR, e, "slurmctld")
        return messages

    def query(self, pid: int, env: Mapping[str, str], expect: Expect) -> None:
        """scontrol inside the controller's namespaces (its address, its /etc/hosts), in parallel."""
        r = self.report
        # the controller's own release of scontrol (chrooted into its view in root mode): the RPC
        # protocol of scontrol and slurmctld must match
        ns = [self.daemons.tools["nsenter"], "-t", str(pid), "-u", "-m", "-n", "--", *self.daemons.argv("scontrol")]
        timeout = self.remaining()  # the controller is up: a slow answer is load, not a hang
        results: dict[str, proc.ProcError | str] = {}
        queries = dict(_QUERIES)
        release = release_of(self.daemons.version)
        if release is not None and release >= TOPOLOGY_YAML:
            # 25.05+: the plugin is per topology in topology.yaml; show config keeps slurm.conf's
            # default (topology/flat), show topoconf prints the topologies slurmctld loaded
            queries["topoconf"] = ["show", "topoconf"]

        def one(what: str) -> None:
            try:
                cp = proc.run(ns + queries[what], timeout=timeout, env=env)
            except proc.ProcError as exc:
                results[what] = exc
                return
            if cp.returncode != 0:
                results[what] = proc.ProcError(f"scontrol show {what} failed: {cp.stderr.strip()}", cp.args)
            else:
                results[what] = cp.stdout

        threads = [threading.Thread(target=one, args=(w,)) for w in queries]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outputs: dict[str, str] = {}
        for what in queries:
            res = results.get(what)
            if isinstance(res, proc.ProcTimeout):
                r.add(ProblemKind.TIMEOUT, f"scontrol show {what} did not answer")
            elif isinstance(res, proc.ProcError) or res is None:
                r.add(ProblemKind.SCONTROL, str(res) if res else f"scontrol show {what}: no answer")
            else:
                outputs[what] = res
        if "config" in outputs:
            config = compare.parse_config(outputs["config"])
            plugin = compare.topoconf_plugin(outputs.get("topoconf", ""))
            if plugin is not None:
                config["TopologyPlugin"] = plugin
            compare.compare_config(r, config, expect)
        if "node" in outputs:
            r.nodes = compare.records(outputs["node"], "NodeName")
            compare.compare_nodes(r, expect)
        if "partition" in outputs:
            r.partitions = compare.records(outputs["partition"], "PartitionName")
            compare.compare_partitions(r, expect)
        if "topology" in outputs:
            r.topology = compare.records(outputs["topology"], "SwitchName")
            r.blocks = compare.records(outputs["topology"], "BlockName")
            r.aggregated_blocks = compare.records(outputs["topology"], "AggregatedBlock")
            compare.compare_topology(r, expect, self.block_sizes)
