"""The ``clusterforge`` command line: thin verbs over the library.

Exit codes: 0 success; 1 the spec or cluster has errors (validation, check, diff with changes);
2 bad input (missing file, malformed YAML, unknown key, wrong type) — always one message, never a
traceback.

About 870 lines in one module on purpose: it is typer's whole command tree (every verb and its
options, read together for consistent names and help, including the `local` sub-commands), each
verb's body is a few lines over the library, and the few helpers every verb prints through (rich
on a terminal, plain lines and tab-separated tables in a pipe) sit beside them.
"""

from __future__ import annotations

import atexit
import copy
import dataclasses
import functools
import gc
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clusterforge.clusterspec.types import SLURM_VERSIONS
from clusterforge.errors import ClusterforgeError

# Each verb imports what it uses when it runs (rich when it prints through a Console, the spec
# models when it reads a spec, pulumi only for plan and diff), so that a verb pays for no other
# verb's modules: `python3 -X importtime -m clusterforge.cli VERB ...` shows what one loads.
if TYPE_CHECKING:
    from rich.console import Console

    from clusterforge.clusterspec import Finding, Level
    from clusterforge.local import LocalCluster
    from clusterforge.resolve import ResolvedCluster

app = typer.Typer(
    name="clusterforge",
    help="One typed cluster spec -> AWS infrastructure, Ansible configuration and topology-correct "
    "Slurm/NCCL configs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# emoji=False: a spec's value or a node's name printed as text is printed as it is (rich would
# replace a ":name:" inside it with an emoji)
@functools.cache
def _out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, emoji=False)


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def _plain() -> bool:
    """Standard output is a pipe or a file, not a terminal: a verb's lines go out as plain text and
    its tables as tab-separated lines, without importing rich (a tenth of a render's instructions).
    Where rich's own switches are set (``TTY_COMPATIBLE``, ``FORCE_COLOR``) rich decides, as before."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return not _out().is_terminal
    try:
        return not sys.stdout.isatty()
    except (AttributeError, ValueError):  # no stdout, or a closed one: nothing to decorate
        return True


def _say(text: str) -> None:
    """One line of plain text (no markup) on standard output: rich's console on a terminal."""
    if _plain():
        print(text, flush=True)
    else:
        _out().print(text, markup=False)


def _write_path(value: str | Path) -> Path:
    """A path the verb writes to: an empty value (an unset ``"$OUT"``) is refused, not taken as ``.``."""
    if not str(value).strip():
        raise typer.BadParameter("an empty path; give the folder or file to write, e.g. --out out/")
    return Path(value)


SpecArg = Annotated[Path, typer.Argument(help="cluster spec YAML, e.g. examples/p5-training.yaml")]
# --facts means the same to every verb: clusterforge.resolve applies the facts before validation
FactsOpt = Annotated[
    Path | None, typer.Option(help="facts folder from playbooks/discover.yml (overrides the spec's facts_dir)")
]

# --force means the same to every verb that writes a render: replace a folder that holds another
# cluster's render, or files but no manifest.json (clusterforge.render.writer refuses it otherwise)
ForceOpt = Annotated[
    bool, typer.Option("--force", help="replace a render folder of another cluster, or one that holds no manifest.json")
]


def _resolve(spec: Path, facts: Path | None = None, slurm_version: str | None = None) -> ResolvedCluster:
    from clusterforge.resolve import resolve_file

    return resolve_file(spec, facts_dir=facts, slurm_version=slurm_version)


@dataclasses.dataclass
class _Rows:
    """A verb's table as data: printed by `_print_table`, for a terminal or for a pipe."""

    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = dataclasses.field(default_factory=list)

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)


def _table(*cols: str) -> _Rows:
    return _Rows(cols)


def _print_table(t: _Rows) -> None:
    """A terminal gets rich's table (no box); a pipe or a file gets the header and one line per
    row, the cells separated by tabs, whole (`cut -f2`, `awk -F'\\t'`): data, not a layout."""
    if _plain():
        sys.stdout.write("".join("\t".join(r) + "\n" for r in (t.columns, *t.rows)))
        sys.stdout.flush()
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for c in t.columns:
        table.add_column(c, overflow="fold")
    for r in t.rows:
        table.add_row(*r)
    _out().print(table)


def _refuse_errors(rc: ResolvedCluster, what: str) -> None:
    """The one refusal of every verb that builds something: the errors, then exit 1."""
    errors = list(rc.errors)
    if errors:
        from clusterforge.clusterspec import Level

        _print_findings(errors, Level.ERROR)
        _say(f"not {what}: fix the errors above (`clusterforge validate` shows warnings too)")
        raise typer.Exit(1)


def _print_findings(findings: list[Finding], fail_level: Level) -> int:
    from clusterforge.clusterspec import Level

    style = {Level.ERROR: "bold red", Level.WARNING: "yellow", Level.INFO: "cyan"}
    for f in findings:
        if _plain():
            _say(f"{f.level.value} {f.path} = {f.value!r}")
        else:
            # styled spans, not markup: a value is the user's text, and rich would read a "[b]" in
            # it as a tag (and stop at a "[/]" with an error)
            from rich.text import Text

            _out().print(Text.assemble((f.level.value, style[f.level]), " ", (f.path, "bold"), f" = {f.value!r}"))
        _say(f"    why: {f.why}")
        _say(f"    fix: {f.fix}  [{f.code}]")
    counts = {lv: sum(1 for f in findings if f.level is lv) for lv in Level}
    _say(f"{counts[Level.ERROR]} error(s), {counts[Level.WARNING]} warning(s), {counts[Level.INFO]} info")
    failing = {Level.ERROR} if fail_level is Level.ERROR else {Level.ERROR, Level.WARNING}
    return 1 if any(f.level in failing for f in findings) else 0


@app.command("validate")
def validate_cmd(
    spec: SpecArg,
    fail_on: Annotated[str, typer.Option(help="lowest level that fails: error or warning")] = "error",
    as_json: Annotated[bool, typer.Option("--json", help="findings as JSON")] = False,
    facts: FactsOpt = None,
) -> None:
    """Check a spec against the schema, the hardware catalog and the target Slurm version."""
    if fail_on not in ("error", "warning"):
        raise ClusterforgeError(f"--fail-on {fail_on!r}: use 'error' or 'warning'")
    rc = _resolve(spec, facts)
    cluster, findings = rc.spec, list(rc.findings)
    if as_json:
        print(
            json.dumps(
                [
                    {"level": f.level.value, "code": f.code, "path": f.path, "value": f.value,
                     "why": f.why, "fix": f.fix}
                    for f in findings
                ],
                indent=2,
                default=str,
            )
        )
        failing = {"error"} if fail_on == "error" else {"error", "warning"}
        raise typer.Exit(1 if any(f.level.value in failing for f in findings) else 0)
    from clusterforge.clusterspec import Level

    _say(f"{spec}: cluster {cluster.name!r}, Slurm {cluster.slurm.version}")
    raise typer.Exit(_print_findings(findings, Level(fail_on)))


@app.command("render")
def render_cmd(
    spec: SpecArg,
    out_dir: Annotated[Path, typer.Option("--out", help="output folder (written atomically)", parser=_write_path)],
    facts: FactsOpt = None,
    slurm_version: Annotated[
        str | None, typer.Option(help=f"render for this Slurm version ({', '.join(SLURM_VERSIONS)})")
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Render slurm.conf, gres.conf, cgroup.conf, topology, slurmdbd.conf, NCCL and health checks."""
    from clusterforge.render import render
    from clusterforge.render.writer import write_render

    rc = _resolve(spec, facts, slurm_version)
    _refuse_errors(rc, "rendered")
    result = render(rc)
    changed = write_render(result, out_dir, force=force)
    files = _table("file", "node path", "sha256", "node groups")
    for f in sorted(result.files.values(), key=lambda f: f.name):
        files.add_row(f.name, f.node_path, f.sha256[:12], ", ".join(f.groups))
    _print_table(files)
    for note in result.notes:
        _say(f"  note: {note}")
    _say(
        f"{'wrote' if changed else 'unchanged'}: {out_dir} ({len(result.files)} files + manifest.json, "
        f"Slurm {result.slurm_version})"
    )


@app.command("check")
def check_cmd(
    rendered: Annotated[Path, typer.Argument(help="a folder written by `clusterforge render`")],
    timeout: Annotated[float, typer.Option(help="seconds the whole check may wait (all daemons together)")] = 30.0,
    build_rootfs: Annotated[
        bool,
        typer.Option(
            "--build-rootfs",
            help="build the release family's cached Debian root filesystem when it is missing (~50 s, once)",
        ),
    ] = False,
) -> None:
    """Load a render into the real slurmctld/slurmd of its release family (the host's own, or a
    cached Debian root filesystem's: 22.05 bookworm, 23.02-24.11 trixie's 24.11, 25.05-26.05 sid's
    26.05; needs root) and compare."""
    from clusterforge.check import check_dir, format_report
    from clusterforge.render.manifest import Manifest

    if not math.isfinite(timeout) or timeout <= 0:  # nan and inf pass click's float parsing
        raise ClusterforgeError(f"--timeout {timeout!r}: give the seconds the check may wait, a number > 0 (e.g. 30)")

    Manifest.read(rendered)  # a missing, old or malformed manifest is bad input: its message, exit 2
    if build_rootfs:
        _err().print(
            "check: builds the release family's root filesystem first if it is missing (timed as rootfs_build)"
        )
    report = check_dir(rendered, timeout_s=timeout, build_rootfs=build_rootfs)
    _say(format_report(report))
    raise typer.Exit(0 if report.ok else 1)


@app.command("plan")
def plan_cmd(
    spec: SpecArg,
    as_json: Annotated[bool, typer.Option("--json", help="stable, sorted JSON (what `diff` compares)")] = False,
    facts: FactsOpt = None,
) -> None:
    """Offline preview of `pulumi up`: resources, rendered files and hourly cost (no CLI, no account)."""
    from clusterforge.plan import build_plan, format_text, to_json

    rc = _resolve(spec, facts)
    _refuse_errors(rc, "planned")
    plan = build_plan(rc, spec_path=spec)
    if as_json:
        sys.stdout.write(to_json(plan))
    else:
        sys.stdout.write(format_text(plan, width=_out().width if _out().is_terminal else 1000))


@app.command("inventory")
def inventory_cmd(
    spec: SpecArg,
    stack_outputs: Annotated[
        Path | None, typer.Option(help="`pulumi stack output --json` of the AWS stack (cloud node groups)")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="default inventories/generated/<cluster>", parser=_write_path)
    ] = None,
    manifest_dir: Annotated[
        Path | None, typer.Option(help="an existing render to point at (default: render next to the inventory)")
    ] = None,
    facts: FactsOpt = None,
    force: ForceOpt = False,
) -> None:
    """Write the Ansible inventory (hosts, groups, contract variables) for the spec and render it."""
    from clusterforge.inventory import generate_inventory

    rc = _resolve(spec, facts)
    _refuse_errors(rc, "written")
    res = generate_inventory(
        rc, stack_outputs=stack_outputs, out_dir=out_dir, manifest_dir=manifest_dir, force=force
    )
    _say(f"inventory: {res.out_dir} ({len(res.written)} files)")
    _say(f"rendered configs: {res.manifest_dir}")


@app.command("configure")
def configure_cmd(
    spec: SpecArg,
    check: Annotated[bool, typer.Option("--check", help="Ansible check mode: change nothing")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="show what each changed file would become")] = False,
    limit: Annotated[str | None, typer.Option(help="only these hosts (an Ansible pattern)")] = None,
    tags: Annotated[str | None, typer.Option(help="only these role tags, e.g. slurm,nccl")] = None,
    playbook: Annotated[str, typer.Option(help="site.yml, validate.yml or discover.yml")] = "site.yml",
    stack_outputs: Annotated[Path | None, typer.Option(help="Pulumi stack outputs JSON (AWS)")] = None,
    inventory_dir: Annotated[Path | None, typer.Option(help="default inventories/generated/<cluster>")] = None,
    vault_password_file: Annotated[
        Path | None, typer.Option(help="Ansible Vault password file for group_vars/all/vault.yml")
    ] = None,
    facts: FactsOpt = None,
    force: ForceOpt = False,
    strategy: Annotated[
        str | None,
        typer.Option(help="linear (Ansible's own) or mitogen (pip install mitogen); "
                     "default $CLUSTERFORGE_ANSIBLE_STRATEGY"),
    ] = None,
) -> None:
    """Render, write the inventory and run the playbook through ansible-runner, with progress."""
    from clusterforge.configure import TextProgress, configure

    res = configure(
        spec,
        check=check,
        diff=diff,
        limit=limit,
        tags=tags,
        playbook=playbook,
        stack_outputs=stack_outputs,
        inventory_dir=inventory_dir,
        vault_password_file=vault_password_file,
        facts_dir=facts,
        force=force,
        strategy=strategy,
        progress=TextProgress(_say),
    )
    for f in res.failures:
        _err().print(f"failed: {f}", markup=False)
    raise typer.Exit(0 if res.ok else 1)


@app.command("retire")
def retire_cmd(
    spec: SpecArg,
    nodes: Annotated[str, typer.Argument(help="the nodes to retire, e.g. 'gpu-[003-004]' (the diff's drain list)")],
    requeue: Annotated[bool, typer.Option("--requeue", help="requeue their requeueable jobs, do not wait")] = False,
    drain_timeout: Annotated[int, typer.Option(help="seconds to wait for their jobs to end")] = 3600,
    stack_outputs: Annotated[Path | None, typer.Option(help="Pulumi stack outputs JSON (AWS)")] = None,
    inventory_dir: Annotated[Path | None, typer.Option(help="default inventories/generated/<cluster>")] = None,
    vault_password_file: Annotated[
        Path | None, typer.Option(help="Ansible Vault password file for group_vars/all/vault.yml")
    ] = None,
) -> None:
    """Scale-in step 1: drain NODES and terminate exactly their instances (playbooks/retire.yml on the
    controller); then `pulumi up` and `clusterforge configure` with the smaller count."""
    from clusterforge import hostlist
    from clusterforge.configure import TextProgress, configure

    try:
        hostlist.expand(nodes)
    except ValueError as exc:
        _err().print(f"NODES {nodes!r}: not a hostlist ({exc}); give e.g. 'gpu-[003-004]'", markup=False)
        raise typer.Exit(2) from None
    res = configure(
        spec,
        playbook="retire.yml",
        extra_vars={"retire_nodes": nodes, "retire_requeue": requeue, "retire_drain_timeout_s": drain_timeout},
        stack_outputs=stack_outputs,
        inventory_dir=inventory_dir,
        vault_password_file=vault_password_file,
        progress=TextProgress(_say),
    )
    for f in res.failures:
        _err().print(f"failed: {f}", markup=False)
    raise typer.Exit(0 if res.ok else 1)


@app.command("diff")
def diff_cmd(
    specs: Annotated[
        list[Path] | None, typer.Argument(help="specs to compare (default: every spec the change touches)")
    ] = None,
    base: Annotated[str | None, typer.Option(help="git ref of the old side (default: merge-base with main)")] = None,
    head: Annotated[str | None, typer.Option(help="git ref of the new side (default: the working tree)")] = None,
    base_spec: Annotated[Path | None, typer.Option(help="compare this spec file ... (with --head-spec)")] = None,
    head_spec: Annotated[Path | None, typer.Option(help="... against this one, without git")] = None,
    fmt: Annotated[str, typer.Option("--format", help="terminal, markdown (a PR comment) or json")] = "terminal",
    output: Annotated[
        Path | None, typer.Option(help="write the report to this file instead of stdout", parser=_write_path)
    ] = None,
    json_output: Annotated[
        Path | None, typer.Option(help="also write the JSON report to this file", parser=_write_path)
    ] = None,
    plan: Annotated[bool, typer.Option(help="plan AWS resources with Pulumi's mock engine (--no-plan skips)")] = True,
    max_chars: Annotated[int, typer.Option(help="size cap of the markdown form", min=1)] = 60_000,
    facts: Annotated[
        Path | None, typer.Option("--facts", help="discovered hardware facts folder; both sides resolve with it")
    ] = None,
) -> None:
    """What a change does: AWS resources, rendered configs, host settings, hourly cost, impact on a
    running cluster.

    Exit codes: 0 no change, 1 changes, 2 error (bad ref, bad option, or a head spec that does not
    load, validate or render: the report is still written and says so at the top).
    """
    from clusterforge.diff import diff_refs, diff_spec_files, print_terminal, to_json, to_markdown

    if fmt not in ("terminal", "markdown", "json"):
        raise ClusterforgeError(f"--format {fmt!r}: use terminal, markdown or json")
    if (base_spec is None) != (head_spec is None):
        raise ClusterforgeError("--base-spec and --head-spec go together: pass both spec files")
    if base_spec is not None and head_spec is not None:
        if specs or base or head:
            raise ClusterforgeError("--base-spec/--head-spec compare two files; drop SPEC, --base and --head")
        report = diff_spec_files(base_spec, head_spec, plan=plan, facts_dir=facts)
    else:
        report = diff_refs(
            Path.cwd(), base=base, head=head, specs=[str(s) for s in specs or []], plan=plan, facts_dir=facts
        )
    if facts is not None and not report.errors:
        # identical sides are not resolved at all, so a broken --facts folder would pass unread
        from clusterforge.resolve import load_facts

        load_facts(facts)
    if json_output is not None:
        _write_report(json_output, "--json-output", to_json(report))
    if fmt == "terminal":
        if output:
            from rich.console import Console

            buf = Console(highlight=False, soft_wrap=True, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
            print_terminal(report, buf)
            buf.file.close()
            _write_report(output, "--output", buf.export_text())
        else:
            from rich.console import Console

            print_terminal(report, Console(highlight=False, soft_wrap=True))
    else:
        text = to_json(report) if fmt == "json" else to_markdown(report, max_chars=max_chars)
        if output:
            _write_report(output, "--output", text)
        else:
            sys.stdout.write(text)
    for s in report.errors:  # also on stderr, whatever the format went to
        sys.stderr.write(f"error: {s.spec}: {s.error}\n")
    raise typer.Exit(report.exit_code)


def _write_report(path: Path, option: str, text: str) -> None:
    """A report file that cannot be written (a folder, a missing parent, read-only) is bad input."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ClusterforgeError(
            f"{option} {str(path)!r}: cannot write the report there ({exc.strerror or exc}); "
            "give a file path in an existing, writable folder"
        ) from None


local_app = typer.Typer(
    help="A real multi-node GPU Slurm cluster on this machine, built by the production roles (root).",
    no_args_is_help=True,
)
app.add_typer(local_app, name="local")
StateOpt = Annotated[
    Path | None, typer.Option("--state", help="state folder (default /var/lib/clusterforge/local)")
]


def _local(state: Path | None) -> LocalCluster:
    from clusterforge.local import LocalCluster

    return LocalCluster(state)


@local_app.command("up")
def local_up_cmd(
    spec: Annotated[
        Path | None,
        typer.Argument(help="spec (default examples/local.yaml); an AWS spec such as examples/local-aws.yaml "
                       "runs on an emulated AWS"),
    ] = None,
    state: StateOpt = None,
    net: Annotated[str, typer.Option(help="private /24 the nodes live on")] = "10.79.0.0/24",
    os_name: Annotated[
        str | None,
        typer.Option("--os", help="node OS instead of the spec's: debian-13 (Slurm 24.11) or debian-12 (Slurm 22.05)"),
    ] = None,
    boot: Annotated[
        str | None,
        typer.Option(help="how nodes boot: systemd (systemd-nspawn, systemd as PID 1; the default on-prem) or "
                     "chroot (sshd as PID 1, daemons under clusterforge-svc; the AWS flavour's instances)"),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="create the nodes, run the playbook in check mode")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="show what each changed file becomes")] = False,
    nodes_only: Annotated[bool, typer.Option("--nodes-only", help="create the nodes, do not run the playbook")] = False,
    torch: Annotated[
        bool,
        typer.Option("--torch", help="PyTorch on every node: a read-only layer of the node rootfs, built once "
                     "(clusterforge/local/torch.sh; the first build downloads about 3 GB)"),
    ] = False,
    image: Annotated[
        str,
        typer.Option(help="bare (the Debian minbase: the roles install every package) or baked (each node group's "
                     "packages baked into a node image, as an AMI is: built once by site.yml's image phase, cached)"),
    ] = "bare",
) -> None:
    """Create the nodes (each its own namespace, hostname, rootfs, /dev) and run playbooks/site.yml on them."""
    from clusterforge.configure import TextProgress
    from clusterforge.local import DEFAULT_SPEC

    lc = _local(state)
    res = lc.up(
        spec or DEFAULT_SPEC,
        net=net,
        os_name=os_name,
        boot=boot,
        torch=torch,
        image=image,
        configure=not nodes_only,
        check=check,
        diff=diff,
        progress=_say,
        ansible_progress=TextProgress(_say),
    )
    times = ", ".join(f"{k} {v:.1f} s" for k, v in res.seconds.items())
    _say(f"local cluster {res.layout.cluster}: {times}")
    if res.configure is not None:
        for f in res.configure.failures:
            _err().print(f"failed: {f}", markup=False)
        if not res.configure.ok:
            again = " ".join(["clusterforge local up", *([str(spec)] if spec else []),
                              *(["--state", str(state)] if state else [])])
            _err().print(f"the playbook failed; the nodes stay up: fix it and run `{again}` again "
                      "(it re-runs the playbook), or `clusterforge local down`", markup=False)
            raise typer.Exit(1)
    if not check and not nodes_only:
        st = lc.status()
        _say(st["sinfo"].rstrip())
        _say(
            f"log in: clusterforge local ssh {lc.submit_node()}    jobs: clusterforge local run -- srun -N2 hostname"
            "    remove: clusterforge local down"
        )


@local_app.command("status")
def local_status_cmd(
    state: StateOpt = None, as_json: Annotated[bool, typer.Option("--json", help="as JSON")] = False
) -> None:
    """The nodes (running or not) and sinfo's view of them."""
    st = _local(state).status()
    if as_json:
        print(json.dumps(st, indent=2))
        return
    _say(f"local cluster {st['cluster']} ({'up' if st['up'] else 'down'}), state {st['state']}")
    for name, n in st["nodes"].items():
        gpus = f" {n['gpus']} GPUs" if n["gpus"] else ""
        state_word = "running" if n["running"] else "STOPPED"
        _say(f"  {name:<10} {n['address']:<14} {n['role']:<10} {state_word}{gpus}")
    for iid, i in st.get("instances", {}).items():
        _say(f"  instance {iid:<20} {i['address']:<14} {i['group']:<8} {i['state']:<16} "
             f"name {i['name'] or '-'}" + (f"  claim error: {i['claim_error']}" if i["claim_error"] else ""))
    for note in st.get("notes", []):
        _err().print(f"  {note}", markup=False)
    if st["sinfo"]:
        _say(st["sinfo"].rstrip())
    if not all(n["running"] for n in st["nodes"].values()) or st.get("notes"):
        raise typer.Exit(1)


@local_app.command("rejoin")
def local_rejoin_cmd(state: StateOpt = None) -> None:
    """AWS flavour: nodes of departed instances DOWN (with EC2's reason), replacements named, configured
    (--limit) and registered with their new addresses."""
    from clusterforge.local.aws.flavour import rejoin

    res = rejoin(_local(state).aws(), say=_say)
    _say(", ".join(f"{k} {v:.1f} s" for k, v in res.seconds.items()) or "nothing to do")


@local_app.command("replace")
def local_replace_cmd(
    node: Annotated[str, typer.Argument(help="compute node to replace, e.g. gpu-002")],
    reason: Annotated[str, typer.Option(help="why (shown in sinfo -R while it is replaced)")] = "by operator",
    state: StateOpt = None,
) -> None:
    """AWS flavour: terminate a node's instance in its Auto Scaling group (the group launches a new one),
    then rejoin: the new instance takes the name, one host is configured, slurmd registers."""
    from clusterforge.local.aws.flavour import replace

    res = replace(_local(state).aws(), node, reason=reason, say=_say)
    _say(", ".join(f"{k} {v:.1f} s" for k, v in res.seconds.items()))


@local_app.command("interrupt")
def local_interrupt_cmd(
    node: Annotated[str, typer.Argument(help="compute node whose instance gets the notice, e.g. gpu-002")],
    lead: Annotated[float, typer.Option("--in", help="seconds from now to the notice's action time")] = 120.0,
    action: Annotated[str, typer.Option(help="the notice's action: terminate, stop or hibernate")] = "terminate",
    state: StateOpt = None,
) -> None:
    """AWS flavour: serve a spot interruption notice from the node's instance-metadata stand-in (EC2's
    two-minute warning). The node agent drains the node and signals and requeues its jobs; the instance
    keeps running (terminate it, or `local replace` it, as EC2 would at the notice's time)."""
    from clusterforge.local.aws.flavour import interrupt

    if action not in ("terminate", "stop", "hibernate"):
        _err().print(f"--action {action!r}: EC2 notices say terminate, stop or hibernate", markup=False)
        raise typer.Exit(2)
    when = interrupt(_local(state).aws(), node, action=action, lead_s=lead)
    _say(f"{node}: spot/instance-action {action} at {when} (served from now on)")


@local_app.command("retire")
def local_retire_cmd(
    nodes: Annotated[str, typer.Argument(help="nodes to retire, e.g. 'gpu-[003-004]'")],
    requeue: Annotated[bool, typer.Option("--requeue", help="requeue their requeueable jobs, do not wait")] = False,
    drain_timeout: Annotated[int, typer.Option(help="seconds to wait for their jobs to end")] = 600,
    state: StateOpt = None,
) -> None:
    """AWS flavour: `clusterforge retire` on the local cluster: drain NODES, terminate exactly their
    instances (their groups shrink by as many), release their names."""
    from clusterforge.configure import TextProgress

    res = _local(state).configure(
        playbook="retire.yml",
        extra_vars={"retire_nodes": nodes, "retire_requeue": requeue, "retire_drain_timeout_s": drain_timeout},
        progress=TextProgress(_say),
    )
    for f in res.failures:
        _err().print(f"failed: {f}", markup=False)
    raise typer.Exit(0 if res.ok else 1)


@local_app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def local_ssh_cmd(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(help="node name, e.g. login or gpu-001")],
    state: StateOpt = None,
) -> None:
    """Log in to a node over SSH (from the cluster's bridge), or run a command there: ssh NODE -- CMD."""
    import os

    argv = _local(state).ssh_argv(node, list(ctx.args))
    os.execvp(argv[0], argv)


@local_app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def local_run_cmd(
    ctx: typer.Context,
    node: Annotated[str | None, typer.Option(help="where to run it (default: the login node)")] = None,
    state: StateOpt = None,
) -> None:
    """Run a command on the login node, as a user would: clusterforge local run -- srun -N2 hostname."""
    import os
    import shlex

    if not ctx.args:
        raise ClusterforgeError("give the command after --, e.g. clusterforge local run -- srun -N2 hostname")
    lc = _local(state)
    argv = lc.exec_argv(node or lc.submit_node(), ["/bin/bash", "-lc", shlex.join(ctx.args)])
    os.execvp(argv[0], argv)


@local_app.command("down")
def local_down_cmd(state: StateOpt = None) -> None:
    """Remove everything `up` made: processes (by PID), namespaces, mounts, cgroup folders, rootfs layers."""
    removed = _local(state).down()
    if not removed:
        _say("nothing to remove: no local cluster here")
    for r in removed:
        _say(f"removed {r}")


@app.command("schema")
def schema_cmd() -> None:
    """Print the spec's JSON Schema (the checked-in copy is schema/cluster.schema.json)."""
    from clusterforge.clusterspec.schema import schema_text

    sys.stdout.write(schema_text())


@app.command("catalog")
def catalog_cmd(
    name: Annotated[str | None, typer.Argument(help="one profile to show in full")] = None,
) -> None:
    """List the hardware catalog, or show one profile with its sources."""
    from clusterforge.catalog import get_profile, load_catalog

    if name is not None:
        p = get_profile(name)
        if p is None:
            raise ClusterforgeError(f"no profile {name!r}; `clusterforge catalog` lists them")
        print(json.dumps(p.model_dump(), indent=2))
        return
    table = _table("profile", "kind", "cpus", "sockets x cores x threads", "gpu")
    for p in load_catalog().values():
        gpu = f"{p.gpu.count}x {p.gpu.model}" if p.gpu else "-"
        layout = f"{p.sockets}x{p.cores_per_socket}x{p.threads_per_core}" if p.cpu_layout_known else "unknown"
        table.add_row(p.name, p.kind, str(p.cpus or "?"), layout, gpu)
    _print_table(table)


@app.command("nccl-verdict")
def nccl_verdict_cmd(
    results: Annotated[
        list[str],
        typer.Argument(help="the job's output folder (all.out, node-<name>.out), nccl-tests output files, "
                       "or NAME=FILE for a node's file"),
    ],
    expect: Annotated[
        str | None, typer.Option(help="instance type or fabric in catalog/nccl_expected.yaml, e.g. p5.48xlarge")
    ] = None,
    expect_gbs: Annotated[float | None, typer.Option(help="expected busbw of the all-nodes run (GB/s)")] = None,
    node_expect_gbs: Annotated[float | None, typer.Option(help="expected busbw of each node alone (GB/s)")] = None,
    min_size: Annotated[str, typer.Option(help="smallest message size judged (nccl-tests sizes: 1G, 512M)")] = "1G",
    tolerance: Annotated[float, typer.Option(help="pass at this fraction of the expected busbw")] = 0.90,
    outlier: Annotated[float, typer.Option(help="a node this fraction below the nodes' median is slow")] = 0.10,
) -> None:
    """Judge nccl-tests all_reduce_perf output against published busbw and name the slow nodes
    (examples/jobs/nccl-allreduce.sbatch). Exit 0 pass, 1 below expectation, 2 unreadable input."""
    from clusterforge.nccl_verdict import collect_inputs, format_verdict, judge, load_expectations, parse_file
    from clusterforge.nccl_verdict.report import parse_size

    if not 0 < tolerance <= 1 or not 0 <= outlier < 1:
        raise ClusterforgeError(
            f"--tolerance {tolerance} / --outlier {outlier}: give 0 < tolerance <= 1 and 0 <= outlier < 1")
    table = load_expectations()
    expected = node_expected = None
    if expect is not None:
        expected = table.get(expect)
        if expected is None:
            raise ClusterforgeError(f"--expect {expect!r}: not in catalog/nccl_expected.yaml; known: "
                                    f"{', '.join(sorted(table))} (or give --expect-gbs/--node-expect-gbs)")
        node_expected = table[expected.single_node] if expected.single_node else (
            expected if expected.scope == "single-node" else None)
    run_path, node_paths = collect_inputs(results)
    if expected is None and expect_gbs is None and node_expect_gbs is None and len(node_paths) < 3:
        raise ClusterforgeError("nothing to hold the figures to: give --expect TYPE (catalog/nccl_expected.yaml), "
                                "--expect-gbs/--node-expect-gbs, or 3+ per-node files to compare with each other")
    verdict = judge(
        parse_file(run_path) if run_path else None,
        {name: parse_file(p) for name, p in node_paths.items()},
        expected,
        expect_gbs=expect_gbs,
        node_expect_gbs=node_expect_gbs,
        node_expected=node_expected,
        min_bytes=parse_size(min_size),
        tolerance=tolerance,
        outlier=outlier,
    )
    for line in format_verdict(verdict):
        _say(line)
    raise typer.Exit(verdict.exit_code)


_spare = typer.Typer()


@_spare.command("_", hidden=True)
def _placeholder() -> None:
    """Never run: a second, hidden command keeps a one-verb tree (``_app_for``) a group, as the
    whole tree is (typer runs a lone command without its name)."""


def _app_for(argv: list[str]) -> typer.Typer:
    """The command tree to build for this run: the named verb alone when the first argument is one.

    typer builds a click command from every registered function's signature when it starts, about
    ten times the work of one verb's; the verb's own options, help, usage lines and errors are the
    same in either tree (tests/test_cli_lazy.py). Anything else (no verb, an option first, an
    unknown word) gets the whole tree, for its command list and "No such command"."""
    verb = argv[0] if argv else ""
    commands = [c for c in app.registered_commands if c.name == verb]
    groups = [g for g in app.registered_groups if g.name == verb]
    if not commands and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands = [*commands, *_spare.registered_commands]
    one.registered_groups = groups
    return one


#: The cyclic collector's young-generation threshold while a verb runs (CPython's default is 700).
GC_YOUNG = 50_000


@functools.cache
def _tune_collector() -> None:
    """The cyclic collector tuned for a process that runs one command (once per process).

    A verb imports a few hundred modules and builds pydantic schemas, typer's commands, Jinja
    templates and (plan, diff) Pulumi's input and output types: hundreds of thousands of container
    objects, nearly all of which live until the process exits. At CPython's default threshold the
    collector walks them hundreds of times and frees next to nothing, and the interpreter's
    finalization walks the whole heap once more (``gc.callbacks`` and ``perf`` show it: a tenth of a
    render's CPU time and a third of a plan's, more on a busy machine, where the walks miss the
    cache). So the collector still runs, and cycles are still freed, but every ``GC_YOUNG``
    allocations instead of every 700, as mypy does for the same reason (``gc.set_threshold(200 *
    1000, 30, 30)`` in mypy/build.py); and at exit what is left is frozen (``gc.freeze``), so that
    finalization's collections skip it. Module teardown still frees it and closes what it holds;
    what is not collected is cyclic garbage left at exit, whose memory the OS takes back (Python
    does not promise to finalize objects alive at exit, and every file clusterforge writes is
    closed before the verb returns). Nothing a verb prints or writes depends on when the collector
    runs. The threshold is not put back when ``main`` returns: lowering it then would start a
    collection of everything the verb left young, the walk this avoids (an in-process caller, such
    as the tests, keeps the larger threshold; the freeze runs when its interpreter exits)."""
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    atexit.register(gc.freeze)


def main() -> None:
    _tune_collector()
    _main()


def _main() -> None:
    # clusterforge uses no pydantic plugins; unless told so, pydantic looks for them in the entry
    # points of every installed distribution before it builds the first model (importlib.metadata:
    # a tenth of a render on a machine with 150 packages). A value the user set is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # standalone_mode=False: click's usage errors come back here, so that the ones click raises
    # before it knows the command (an option without its value) also get the "Try --help" line
    try:
        code = _app_for(sys.argv[1:])(standalone_mode=False)
    except typer.Abort:
        _err().print("Aborted!", markup=False)
        sys.exit(1)
    except typer.TyperException as exc:  # typer's own click: its usage errors (exit 2)
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
        else:
            from typer.rich_utils import rich_format_error

            rich_format_error(exc)  # type: ignore[arg-type]
            if getattr(exc, "ctx", None) is None:
                verb = " ".join(a for a in sys.argv[1:2] if not a.startswith("-"))
                _err().print(f"Try 'clusterforge {verb + ' ' if verb else ''}--help' for help.", markup=False)
        sys.exit(getattr(exc, "exit_code", 2))
    except ClusterforgeError as exc:
        _err().print(f"error: {exc}", markup=False)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
