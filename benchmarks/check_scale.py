"""`clusterforge check` of 2,048 to 65,536 nodes: time to "Running as primary controller".

    sudo python3 benchmarks/check_scale.py [--nodes 2048,16384,65536] [--repeat N] [--slurm 22.05]

The cluster is examples/p5-training.yaml with its two compute groups scaled to N nodes in all
(four fifths p5.48xlarge on EFA, one fifth c7i.48xlarge), rendered for ``--slurm`` (22.05: the
host's Debian 12 daemons; other releases run their family's cached root filesystem). Each render
is checked ``--repeat`` times, one check at a time (each makes its private namespaces and removes
them). Figures: the median of the whole check and of ``slurmctld_start`` (from starting slurmctld
to its "Running as primary controller" line), and the other steps' medians, among them the CPU
seconds slurmctld used to that line (``slurmctld_start_cpu``) and ``slurmd -G`` used
(``slurmd_G_cpu``): on a loaded machine those stay put while the wall times grow. Needs root.

``--profile`` times, in the last check of each node count, the functions that slurmctld's start
spends its time in: ``read_slurm_conf``, and within it
``gres_g_node_config_load`` (called once per CLOUD node, it parses all of ``gres.conf``) and
``slurm_build_all_nodeline_info`` (the ``NodeName`` lines, Slurm's node-name hash). It puts
``perf probe`` uprobes on their entries and returns, records them with ``perf record``, and sums
each call's time from entry to return: exact call counts and times, not samples. The probes are
removed at the end. Each probe hit costs a few microseconds, counted in the times. The probed
daemons are the host's for 22.05 and the release's cached root filesystem's for the others.

``--gres-conf one-line`` replaces the rendered ``gres.conf`` before the checks with one line per
GPU node group: its ``NodeName`` hostlist, ``Name``, ``Type`` and one ``File=`` range of all its
devices, without ``AutoDetect``, ``Cores=`` or ``Links=``. That is the form of ParallelCluster's
gres.conf (one line per compute resource; see its ``slurm_parallelcluster_*_gres.conf``), the
fewest lines Slurm can parse for each CLOUD node. It measures Slurm's floor, not a file
clusterforge writes: with 22.05 the check reports the missing ``Cores=`` (``gres_mismatch``), so
its rows say NO; the times are what to read.

``--node-table grown`` renders slurm.conf without its ``MaxNodeCount`` line, as renders were
before it (``render.slurm.node_table_setting`` returns nothing for the run): slurmctld and
``slurmd -G`` then grow the node table 100 records at a time and rehash every node at each growth,
which is what a production start paid.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterforge import hostlist  # noqa: E402
from clusterforge.catalog.os_slurm import release_family, shipped  # noqa: E402
from clusterforge.check import check_dir, format_report  # noqa: E402
from clusterforge.check.environment import preflight, thread_ceiling  # noqa: E402
from clusterforge.check.report import CheckReport, ProblemKind  # noqa: E402
from clusterforge.clusterspec import Cluster, parse_spec  # noqa: E402
from clusterforge.render import render_cluster  # noqa: E402
from clusterforge.render import slurm as slurm_render  # noqa: E402
from clusterforge.render.build import build_model  # noqa: E402
from clusterforge.render.writer import write_render  # noqa: E402
from clusterforge.resolve import resolve  # noqa: E402


def scaled_spec(nodes: int, slurm: str, kind: str = "cloud") -> dict[str, Any]:
    """p5-training (``cloud``: State=CLOUD nodes) or onprem-dgx (``onprem``: DGX H100 and CPU
    hosts given by name only, no addresses, no racks) with N compute nodes, 4/5 of them GPU nodes."""
    gpu = nodes * 4 // 5
    if kind == "cloud":
        spec: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "p5-training.yaml").read_text())
        counts = {"gpu": gpu, "cpu": nodes - gpu}
        for g in spec["node_groups"]:
            if g["name"] in counts:
                g["cloud"]["count"] = counts[g["name"]]
    else:
        spec = yaml.safe_load((ROOT / "examples" / "onprem-dgx.yaml").read_text())
        hosts = {"dgx": f"dgx-[00001-{gpu:05d}]", "cpu": f"cpu-[00001-{nodes - gpu:05d}]"}
        for g in spec["node_groups"]:
            if g["name"] in hosts:
                g["onprem"] = {"hosts": hosts[g["name"]], "profile": g["onprem"]["profile"]}
        spec.pop("topology", None)
    spec["slurm"]["version"] = slurm
    have = shipped(spec["os"])
    if have.family != release_family(slurm):
        # The example's OS does not ship this release, so a user of it names the site's own builds
        # (docs/slurm-packages.md); the render does not read the repository, only validation does.
        spec["slurm"]["package_repo"] = {
            "uris": ["https://apt.example.org/slurm"], "suites": [have.codename],
            "signed_by": "https://apt.example.org/slurm/site-slurm.asc",
        }
    return spec


PROBE_GROUP = "cfscale"
# (binary: "ctld" or "lib", function) for each timed function, in the order printed
PROBED = (("ctld", "read_slurm_conf"), ("lib", "gres_g_node_config_load"),
          ("lib", "slurm_build_all_nodeline_info"))


def _in_root(root: Path, path: str) -> Path:
    """``path`` as seen inside ``root``, its links followed there: Debian's slurmctld is a link to
    /etc/alternatives, which names slurmctld-wlm, both absolute inside the root filesystem."""
    here = root / path.lstrip("/")
    for _ in range(8):
        if not here.is_symlink():
            return here
        target = os.readlink(here)
        here = root / target.lstrip("/") if target.startswith("/") else here.parent / target
    return here


def probe_binaries(slurm: str) -> dict[str, Path]:
    """The slurmctld that checks a render for ``slurm``, as the check's own preflight picks it (the
    host's, or the one in the release's cached root filesystem, run there with chroot), and the
    libslurmfull it loads. A uprobe follows the file, whichever root a process sees it from."""
    with tempfile.TemporaryDirectory(prefix="cf-probe-") as tmp:
        report = CheckReport(Path(tmp))
        daemons = preflight(report, slurm, Path(tmp))
    if daemons is None:
        raise SystemExit("--profile: " + "; ".join(pr.message for pr in report.problems))
    root = daemons.root or Path("/")
    ctld = _in_root(root, daemons.tools["slurmctld"])
    lib = next(iter(sorted((root / "usr/lib").glob("*/slurm-wlm/libslurmfull.so"))), None)
    if lib is None:
        raise SystemExit(f"--profile: no usr/lib/*/slurm-wlm/libslurmfull.so under {root}")
    return {"ctld": ctld, "lib": lib}


def add_probes(slurm: str) -> None:
    binaries = probe_binaries(slurm)
    for where, func in PROBED:
        cp = subprocess.run(["perf", "probe", "--quiet", "-x", str(binaries[where]),
                             "--add", f"{PROBE_GROUP}:{func}={func}",
                             # perf names a return probe EVENT__return itself
                             "--add", f"{PROBE_GROUP}:{func}={func}%return"],
                            capture_output=True, text=True)
        if cp.returncode != 0:
            raise SystemExit(f"--profile: `perf probe` could not put a uprobe on {func} in {binaries[where]} "
                             f"(a kernel with CONFIG_UPROBE_EVENTS and tracefs is needed): {cp.stderr.strip()[-400:]}")


def delete_probes() -> None:
    subprocess.run(["perf", "probe", "--quiet", "--del", f"{PROBE_GROUP}:*"], capture_output=True)


def start_perf(data: Path, timeout_s: float = 30.0) -> subprocess.Popen[bytes]:
    """Every CPU: slurmctld runs in the check's namespaces, under a PID not known in advance.
    perf starts with its events off and turns them on when told through its control FIFO; its
    answer on the ack FIFO means they are on, so the check starts after that. Both FIFOs are
    opened without blocking, so a perf that never starts is an error after ``timeout_s``."""
    ctl, ack = data.with_suffix(".ctl"), data.with_suffix(".ack")
    for fifo in (ctl, ack):
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
    to_perf = os.open(ctl, os.O_RDWR)  # O_RDWR: a FIFO opened so does not wait for its reader
    from_perf = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
    proc = subprocess.Popen(
        ["perf", "record", "--all-cpus", "--event", f"{PROBE_GROUP}:*", "--output", str(data), "--quiet",
         "--delay=-1", f"--control=fifo:{ctl},{ack}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        os.write(to_perf, b"enable\n")
        deadline = time.monotonic() + timeout_s
        while b"ack" not in _read_ready(from_perf):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                err = proc.communicate()[1].decode(errors="replace")[-500:]
                why = f"exited (rc={proc.returncode})" if proc.returncode != -signal.SIGKILL else \
                    f"no answer within {timeout_s:.0f} s"
                raise SystemExit(f"perf record did not turn its events on: {why}: {err}")
    finally:
        os.close(to_perf)
        os.close(from_perf)
    return proc


def _read_ready(fd: int) -> bytes:
    """What the FIFO holds now; b"" while perf has not answered (or not opened it yet)."""
    if not select.select([fd], [], [], 0.2)[0]:
        return b""
    data = os.read(fd, 64)
    if not data:  # no writer yet: a FIFO then reads as end of file at once
        time.sleep(0.1)
    return data


def stop_perf(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)  # perf writes its data file on SIGINT
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise SystemExit("perf record did not stop within 120 s after SIGINT") from None
    if proc.returncode not in (0, -signal.SIGINT):
        raise SystemExit(f"perf record failed (rc={proc.returncode}): {err.decode(errors='replace')[-500:]}")


def probe_times(data: Path) -> dict[str, tuple[int, float]]:
    """Calls and seconds from entry to return of each probed function in slurmctld (``slurmd -G``
    runs the node lines too, at the same time: its events are left out by name)."""
    text = subprocess.run(
        ["perf", "script", "--input", str(data), "--comm", "slurmctld", "--fields", "pid,time,event"],
        check=True, capture_output=True, text=True).stdout
    entered: dict[tuple[str, str], float] = {}
    calls: collections.Counter[str] = collections.Counter()
    seconds: dict[str, float] = collections.defaultdict(float)
    for line in text.splitlines():
        # "  PID  SECONDS.MICROS:  cfscale:FUNCTION[__return]: "
        fields = line.split()
        if len(fields) < 3 or not fields[2].startswith(f"{PROBE_GROUP}:"):
            continue
        pid, at, event = fields[0], float(fields[1].rstrip(":")), fields[2].rstrip(":").split(":", 1)[1]
        func = event.removesuffix("__return")
        if event == func:
            entered[(pid, func)] = at
        elif (pid, func) in entered:
            calls[func] += 1
            seconds[func] += at - entered.pop((pid, func))
    return {func: (calls[func], seconds[func]) for _, func in PROBED}


def print_probe_times(data: Path, nodes: int) -> None:
    times = probe_times(data)
    whole = times["read_slurm_conf"][1]
    print(f"    slurmctld's start at {nodes} nodes, from entry to return (perf probe):")
    for func, (n, secs) in times.items():
        share = f"{100 * secs / whole:5.1f} % of read_slurm_conf" if whole and func != "read_slurm_conf" else ""
        print(f"      {func:32s} {n:6d} calls  {secs:7.2f} s  {share}")


def write_one_line_gres(cluster: Cluster, out: Path) -> None:
    """``out/slurm/gres.conf`` as one line per GPU node group, from the render model's data."""
    model = build_model(resolve(cluster, base_dir=ROOT / "examples"))
    lines = [f"NodeName={n.hostlist} Name=gpu Type={n.gpus.type} File={hostlist.compress(list(n.gpus.device_paths))}"
             for n in model.compute if n.gpus is not None]
    (out / "slurm" / "gres.conf").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="2048,16384,65536", help="comma-separated node counts")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--slurm", default="22.05", help="the Slurm release to render for")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds each check may take")
    ap.add_argument("--kind", choices=("cloud", "onprem"), default="cloud",
                    help="cloud: p5-training's Auto Scaling groups (State=CLOUD); onprem: onprem-dgx's hosts")
    ap.add_argument("--gres-conf", choices=("rendered", "one-line"), default="rendered",
                    help="one-line: ParallelCluster's form, one line per GPU group (Slurm's floor; the check flags it)")
    ap.add_argument("--node-table", choices=("rendered", "grown"), default="rendered",
                    help="grown: no MaxNodeCount in slurm.conf, as renders were before it (the table grows as read)")
    ap.add_argument("--profile", action="store_true",
                    help="time slurmctld's start functions in the last check of each node count (perf probe)")
    args = ap.parse_args()
    if args.profile and shutil.which("perf") is None:
        print("--profile: `perf` is not on PATH; install Debian's `linux-perf` package", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="cf-check-scale-"))
    try:
        if args.profile:
            add_probes(args.slurm)
        example = "p5-training" if args.kind == "cloud" else "onprem-dgx"
        print(f"examples/{example}.yaml scaled, Slurm {args.slurm}, {args.repeat} checks each (seconds); "
              f"load average {os.getloadavg()[0]:.2f} before")
        ceiling, limits = thread_ceiling()
        # on-prem nodes: slurmctld may need a thread per node after its start (no slurmd answers)
        print(f"thread ceiling per process about {ceiling:,} ({limits})")
        print("  nodes  ok   check median (min-max)   to primary median   steps (median)")
        for nodes in (int(n) for n in args.nodes.split(",")):
            out = tmp / str(nodes)
            cluster = parse_spec(scaled_spec(nodes, args.slurm, args.kind))
            errors = resolve(cluster, base_dir=ROOT / "examples").errors
            if errors:  # `clusterforge render` would refuse this spec: its check measures nothing
                for f in errors:
                    print(f"error {f.path} = {f.value!r}: {f.why} (fix: {f.fix})", file=sys.stderr)
                return 2
            grown = mock.patch.object(slurm_render, "node_table_setting", return_value=None)
            with grown if args.node_table == "grown" else contextlib.nullcontext():
                write_render(render_cluster(cluster, base_dir=ROOT / "examples"), out)
            if args.gres_conf == "one-line":
                write_one_line_gres(cluster, out)
            totals: list[float] = []
            steps: dict[str, list[float]] = {}
            ok = True
            for i in range(args.repeat):
                perf = start_perf(tmp / "perf.data") if args.profile and i == args.repeat - 1 else None
                try:
                    report = check_dir(out, timeout_s=args.timeout)
                finally:
                    if perf is not None:
                        stop_perf(perf)
                if not report.ok:
                    ok = False
                    # --gres-conf one-line: the check flags the missing Cores=, as it should
                    expected = args.gres_conf == "one-line" and all(
                        pr.kind == ProblemKind.GRES_MISMATCH for pr in report.problems)
                    if not expected:
                        print(format_report(report)[-3000:], file=sys.stderr)
                totals.append(report.timings["total"])
                for k, v in report.timings.items():
                    if k != "total":
                        steps.setdefault(k.split(":")[0], []).append(v)
            start = statistics.median(steps.get("slurmctld_start", [float("nan")]))
            med = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in steps.items() if k != "slurmctld_start")
            print(f"  {nodes:5d}  {'yes' if ok else 'NO':3s}  {statistics.median(totals):6.2f} "
                  f"({min(totals):.2f}-{max(totals):.2f})        {start:6.2f}            {med}", flush=True)
            if args.profile:
                print_probe_times(tmp / "perf.data", nodes)
                (tmp / "perf.data").unlink()
        print(f"load average {os.getloadavg()[0]:.2f} after")
    finally:
        if args.profile:
            delete_probes()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
