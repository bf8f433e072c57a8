"""Run the playbooks through ansible-runner: render, write the inventory, configure the hosts.

The CLI verb ``clusterforge configure SPEC [--check] [--diff] [--limit HOSTS] [--tags T]`` is::

    result = configure(
        spec_path: Path,
        *,
        check: bool = False,
        diff: bool = False,
        limit: str | None = None,
        tags: str | None = None,             # comma-separated, as ansible-playbook takes them
        skip_tags: str | None = None,
        playbook: str = "site.yml",          # a file in playbooks/ (validate.yml, discover.yml, ...)
        inventory_dir: Path | None = None,   # default inventories/generated/<cluster>
        stack_outputs: Path | None = None,   # Pulumi stack outputs (AWS groups)
        extra_inventories: Sequence[Path] = (),
        extra_vars_files: Sequence[Path] = (),
        secrets: Mapping[str, str] | None = None,
        vault_password_file: Path | None = None,
        progress: Callable[[ProgressEvent], None] | None = None,  # None = quiet; see TextProgress
        keep_artifacts: Path | None = None,  # where the scrubbed ansible-runner artifacts go
        envvars: Mapping[str, str] | None = None,
        regenerate: bool = True,             # render + write the inventory first
        strategy: str | None = None,         # linear | mitogen (default $CLUSTERFORGE_ANSIBLE_STRATEGY)
    ) -> ConfigureResult                     # .ok, .rc, .status, .stats, .changed, .duration_s

and exits non-zero when ``not result.ok``. ``TextProgress(console_print)`` gives the one-line-per-
task progress display the CLI shows.

Secrets: the preferred source is an Ansible Vault file in the inventory (``vault_password_file``),
so no secret value passes through this process at all. Values handed in as ``secrets`` (for
example read from AWS SSM) go into a 0600 vars file in a private temporary folder, passed with
``-e @file`` and deleted when the run ends. ansible-runner is told not to write its ``env/`` files
or the stdout file, runs in a private temporary folder, and before any artifact is kept it is
searched for every secret value; a hit deletes the artifacts and fails the run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clusterforge.errors import ClusterforgeError

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO_ROOT / "playbooks"
ANSIBLE_CFG = REPO_ROOT / "ansible.cfg"
STRATEGY_PLUGINS = PLAYBOOKS / "strategy_plugins"


class ConfigureError(ClusterforgeError):
    """The configure run could not start or left a secret behind."""


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a run: a play or task starting, or one host's result of a task."""

    kind: str  # "play", "task", "ok", "changed", "skipped", "failed", "unreachable", "stats"
    name: str = ""
    host: str = ""
    message: str = ""


@dataclass
class ConfigureResult:
    rc: int
    status: str
    stats: dict[str, dict[str, int]]
    duration_s: float
    artifact_dir: Path | None
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.status == "successful"

    @property
    def changed(self) -> int:
        return sum(h.get("changed", 0) for h in self.stats.values())


class TextProgress:
    """A compact progress display: one line per task, hosts' results summarised on it.

    ``TextProgress(print)`` writes plain lines; the CLI passes a rich console's ``print``.
    """

    def __init__(self, emit: Callable[[str], Any]) -> None:
        self.emit = emit
        self.task_no = 0
        self._task = ""

    def __call__(self, ev: ProgressEvent) -> None:
        if ev.kind == "play":
            self.emit(f"== {ev.name}")
        elif ev.kind == "task":
            self.task_no += 1
            self._task = ev.name
        elif ev.kind in ("changed", "failed", "unreachable"):
            msg = f": {ev.message}" if ev.message and ev.kind != "changed" else ""
            self.emit(f"  [{self.task_no:3d}] {ev.host}: {ev.kind} {self._task}{msg}")
        elif ev.kind == "stats":
            self.emit(f"== {ev.message}")


def _events_to_progress(progress: Callable[[ProgressEvent], None]) -> Callable[[dict[str, Any]], bool]:
    def handler(event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host", "")
        res = data.get("res") or {}
        if kind == "playbook_on_play_start":
            progress(ProgressEvent("play", name=data.get("play", "")))
        elif kind == "playbook_on_task_start":
            progress(ProgressEvent("task", name=data.get("task", "")))
        elif kind == "runner_on_ok":
            progress(ProgressEvent("changed" if res.get("changed") else "ok", name=data.get("task", ""), host=host))
        elif kind == "runner_on_skipped":
            progress(ProgressEvent("skipped", name=data.get("task", ""), host=host))
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            msg = str(res.get("msg", ""))[:300]
            progress(ProgressEvent("failed", name=data.get("task", ""), host=host, message=msg))
        elif kind == "runner_on_unreachable":
            msg = str(res.get("msg", ""))[:300]
            progress(ProgressEvent("unreachable", name=data.get("task", ""), host=host, message=msg))
        return True  # keep the event (ansible-runner writes it to job_events; no_log ones are censored)

    return handler


def _recap(stats: Mapping[str, Mapping[str, int]]) -> str:
    parts = []
    for h in sorted(stats):
        s = stats[h]
        parts.append(
            f"{h} ok={s.get('ok', 0)} changed={s.get('changed', 0)} failed={s.get('failed', 0)} "
            f"unreachable={s.get('unreachable', 0)}"
        )
    return "; ".join(parts)


def scrub_artifacts(root: Path, secret_values: Sequence[str]) -> list[Path]:
    """Files under ``root`` that contain any of ``secret_values`` (empty values are ignored)."""
    needles = [v.encode() for v in secret_values if v]
    hits: list[Path] = []
    if not needles:
        return hits
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if any(n in data for n in needles):
                hits.append(p)
    return hits


def _stats_from_runner(r: Any) -> dict[str, dict[str, int]]:
    raw = getattr(r, "stats", None) or {}
    out: dict[str, dict[str, int]] = {}
    for key, short in (
        ("ok", "ok"),
        ("changed", "changed"),
        ("failures", "failed"),
        ("dark", "unreachable"),
        ("skipped", "skipped"),
        ("rescued", "rescued"),
        ("ignored", "ignored"),
    ):
        for host, n in (raw.get(key) or {}).items():
            out.setdefault(host, {})[short] = int(n)
    return out


def configure(
    spec_path: Path,
    *,
    check: bool = False,
    diff: bool = False,
    limit: str | None = None,
    tags: str | None = None,
    skip_tags: str | None = None,
    playbook: str = "site.yml",
    inventory_dir: Path | None = None,
    stack_outputs: Path | None = None,
    extra_inventories: Sequence[Path] = (),
    extra_vars_files: Sequence[Path] = (),
    extra_vars: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    vault_password_file: Path | None = None,
    progress: Callable[[ProgressEvent], None] | None = None,
    keep_artifacts: Path | None = None,
    envvars: Mapping[str, str] | None = None,
    regenerate: bool = True,
    facts_dir: Path | None = None,
    force: bool = False,
    strategy: str | None = None,
) -> ConfigureResult:
    """Render the spec, write its inventory and run ``playbooks/<playbook>`` with ansible-runner.

    ``force``: write the render even over a folder of another cluster's render (``write_render``).
    ``strategy``: ``linear`` (Ansible's own) or ``mitogen`` (see :func:`strategy_env`); default
    ``$CLUSTERFORGE_ANSIBLE_STRATEGY``, else ``linear``."""
    try:
        import ansible_runner
    except ImportError:
        raise ConfigureError("ansible-runner is not installed: pip install ansible-core ansible-runner") from None
    pb = PLAYBOOKS / playbook
    if not pb.is_file():
        raise ConfigureError(
            f"no playbook {playbook!r} in {PLAYBOOKS}; choose site.yml, validate.yml, discover.yml or retire.yml"
        )
    binary = shutil.which("ansible-playbook")
    if binary is None:
        raise ConfigureError("ansible-playbook is not on PATH: pip install ansible-core (in this environment)")

    strategy_vars = strategy_env(strategy)
    from clusterforge.inventory import generate_inventory
    from clusterforge.resolve import resolve_file

    spec_path = Path(spec_path)
    # resolved once; a spec with errors is refused here exactly as `render` refuses it
    rc = resolve_file(spec_path, facts_dir=facts_dir).require_valid("configured")
    cluster = rc.spec
    # where ansible-runner's folder goes (refused before anything is written)
    from clusterforge.configure.workdir import RunnerTmpError, runner_parent

    hosts = sum(g.node_count for g in cluster.node_groups)
    try:
        parent = runner_parent(hosts)
    except RunnerTmpError as e:
        raise ConfigureError(str(e)) from None
    inv_dir = Path(inventory_dir) if inventory_dir else Path("inventories") / "generated" / cluster.name
    if regenerate:
        generate_inventory(rc, stack_outputs=stack_outputs, out_dir=inv_dir, force=force)
    elif not (inv_dir / "hosts.yml").is_file():
        raise ConfigureError(f"{inv_dir} holds no hosts.yml; run `clusterforge inventory {spec_path}` first")

    work = Path(tempfile.mkdtemp(prefix="clusterforge-configure-", dir=str(parent) if parent else None))
    os.chmod(work, 0o700)
    secret_values = [str(v) for v in (secrets or {}).values()]
    cmdline: list[str] = []
    try:
        if secrets:
            sfile = work / "secrets.yml"
            fd = os.open(sfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                yaml.safe_dump({"clusterforge_secrets": dict(secrets)}, fh)
            cmdline += ["-e", f"@{sfile}"]
        for f in extra_vars_files:
            cmdline += ["-e", f"@{Path(f).resolve()}"]
        if extra_vars:
            # a file, not `-e k=v`: values keep their types and hostlists their brackets
            vfile = work / "extra-vars.yml"
            vfile.write_text(yaml.safe_dump(dict(extra_vars)))
            cmdline += ["-e", f"@{vfile}"]
        if vault_password_file is not None:
            cmdline += ["--vault-password-file", str(Path(vault_password_file).resolve())]
        if check:
            cmdline.append("--check")
        if diff:
            cmdline.append("--diff")
        env = {
            "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
            # ansible-runner starts ansible-playbook from PATH (rc 127 when a venv's bin is missing)
            "PATH": os.pathsep.join([str(Path(binary).parent), os.environ.get("PATH", "")]),
            "ANSIBLE_FORCE_COLOR": "0",
            **strategy_vars,
            **inventory_env([inv_dir, *extra_inventories]),
            **(envvars or {}),
        }
        pdd = work / "runner"
        pdd.mkdir(mode=0o700)  # ansible-runner refuses a private_data_dir that does not exist
        started = time.monotonic()
        r = ansible_runner.run(
            private_data_dir=str(pdd),
            playbook=str(pb),
            inventory=[str(inv_dir.resolve()), *(str(Path(i).resolve()) for i in extra_inventories)],
            limit=limit,
            tags=tags,
            skip_tags=skip_tags,
            cmdline=" ".join(_quote(c) for c in cmdline) or None,
            envvars=env,
            quiet=True,
            suppress_env_files=True,
            suppress_output_file=True,
            event_handler=_events_to_progress(progress) if progress else None,
            project_dir=str(REPO_ROOT),
            # ansible-runner's default, a JSON file per host in the artifacts, makes Ansible
            # decode the host's facts anew for every task it queues and encode them at every
            # fact change; facts are gathered at every run (site.yml's first play) anyway
            fact_cache_type="memory",
        )
        duration = time.monotonic() - started
        stats = _stats_from_runner(r)
        if progress:
            progress(ProgressEvent("stats", message=f"{r.status} in {duration:.1f} s: {_recap(stats)}"))
        failures = []
        for ev in r.events:
            if ev.get("event") in ("runner_on_failed", "runner_on_unreachable"):
                d = ev.get("event_data") or {}
                if d.get("ignore_errors"):
                    continue
                res = d.get("res") or {}
                # a loop's failure says only "One or more items failed": the items say what failed
                items = [i for i in res.get("results") or [] if isinstance(i, dict) and i.get("failed")]
                item_msgs = [str(i.get("msg", "")) for i in items]
                msg = "; ".join(item_msgs) if item_msgs else str(res.get("msg", ""))
                failures.append(f"{d.get('host')}: {d.get('task')}: {msg[:1000]}")
        # the secrets file goes first, then every artifact is searched for the values
        if secrets:
            (work / "secrets.yml").unlink(missing_ok=True)
        # ansible-runner 2.4 still writes the play's text output beside the events despite
        # suppress_output_file; the events hold the same, so no second copy is kept.
        for name in ("stdout", "stderr"):
            for f in (pdd / "artifacts").glob(f"*/{name}"):
                f.unlink()
        leaked = scrub_artifacts(pdd, secret_values)
        if leaked:
            shutil.rmtree(pdd, ignore_errors=True)
            raise ConfigureError(
                f"a secret value appeared in ansible-runner artifacts ({len(leaked)} file(s)); they were deleted. "
                "A task that handles secrets lacks no_log: true"
            )
        kept = None
        if keep_artifacts is not None:
            kept = Path(keep_artifacts)
            if kept.exists():
                shutil.rmtree(kept)
            kept.parent.mkdir(parents=True, exist_ok=True)
            # the run's folder is deleted next: a rename on the same file system, else a copy
            shutil.move(str(pdd / "artifacts"), str(kept))
        return ConfigureResult(
            rc=int(r.rc), status=str(r.status), stats=stats, duration_s=duration, artifact_dir=kept, failures=failures
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


STRATEGIES = ("linear", "mitogen")


def strategy_env(strategy: str | None) -> dict[str, str]:
    """The environment that selects Ansible's execution strategy.

    ``linear``: Ansible's own order, task by task on every host. ``mitogen``: Mitogen for Ansible
    (the ``mitogen`` package) keeps one Python interpreter per host for the whole run and sends it
    each module, instead of starting Python over SSH for every task on every host; it is Mitogen's
    strategy plugin ``mitogen_linear``, the same order. Modules that re-execute themselves under
    another interpreter (``respawn_module``, mitogen-hq/mitogen#849) are the known gap: site.yml
    installs python3-apt first so the apt modules never need it.

    Both are the ``playbooks/strategy_plugins`` wrappers (``clusterforge_linear``,
    ``clusterforge_mitogen_linear``), which decide a host's skip of a task in Ansible's own process
    instead of a forked worker (``controller_skip``), run there the tasks that need no host
    (``controller_run``) and compile each template string once per run (``template_cache``); the
    plays, roles and results are the same."""
    chosen = strategy or os.environ.get("CLUSTERFORGE_ANSIBLE_STRATEGY") or "linear"
    if chosen not in STRATEGIES:
        raise ConfigureError(
            f"strategy {chosen!r} (from --strategy or CLUSTERFORGE_ANSIBLE_STRATEGY) is not one of "
            f"{', '.join(STRATEGIES)}; use linear (Ansible's own) or mitogen (pip install mitogen)"
        )
    env = {"ANSIBLE_STRATEGY_PLUGINS": str(STRATEGY_PLUGINS), "ANSIBLE_STRATEGY": "clusterforge_linear"}
    if chosen == "linear":
        return env
    if importlib.util.find_spec("ansible_mitogen") is None:
        raise ConfigureError(
            "strategy mitogen needs the mitogen package on the Ansible host: pip install mitogen "
            "(or use --strategy linear)"
        )
    return env | {"ANSIBLE_STRATEGY": "clusterforge_mitogen_linear"}


#: The inventory plugins a run without an aws_ec2 plugin config enables: ansible.cfg's
#: ``enable_plugins`` without ``amazon.aws.aws_ec2`` (tests/test_ansible_configure.py keeps the two
#: in step). Loading that plugin imports amazon.aws and botocore in ansible-playbook, about 0.15 s
#: of every on-prem or local run for an inventory source it never has.
INVENTORY_PLUGINS_WITHOUT_EC2 = "ansible.builtin.yaml,ansible.builtin.ini"


def inventory_env(inventories: Sequence[Path]) -> dict[str, str]:
    """``ANSIBLE_INVENTORY_ENABLED`` without the aws_ec2 plugin when no inventory holds its config.

    A config is a file named ``*aws_ec2.yml`` or ``*aws_ec2.yaml`` (the plugin's own rule), given
    directly or anywhere under an inventory folder. A variable the user set already is kept."""
    if "ANSIBLE_INVENTORY_ENABLED" in os.environ:
        return {}
    for inv in inventories:
        p = Path(inv)
        if any(f.name.endswith(("aws_ec2.yml", "aws_ec2.yaml")) for f in (p.rglob("*") if p.is_dir() else [p])):
            return {}
    return {"ANSIBLE_INVENTORY_ENABLED": INVENTORY_PLUGINS_WITHOUT_EC2}


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)
