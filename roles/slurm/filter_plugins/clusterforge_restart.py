"""``slurm_actions``: the daemon actions one host runs after the Slurm role installed its files.

The role holds no restart policy of its own: this filter asks clusterforge's, the one the diff's PR
comment reports (``clusterforge.render.restart``). It compares the manifest this host last
installed (the copy the role keeps at ``/etc/slurm/.clusterforge-manifest.json``) with the new
render's, record by record, and returns the handlers this host runs, in handler order:
``restart slurmdbd``, ``restart slurmctld``, ``reconfigure``, ``restart slurmd``. The policy is the
installed release's (the copy's ``slurm_version``): from 23.11 a reconfigure also applies plugin,
GRES and cgroup changes, from 24.11 node changes too; a change of release restarts every daemon.

Which files count: those the role changed on this host in this run, plus those whose hash differs
between the two manifests (installed by an earlier run that failed before its handlers ran and the
copy was written, so the actions it owed are not lost).

Conservative fallbacks, each a file's own ``on_change`` (its file-level rule in the manifest):

* no copy of the last install (first run, or a host configured before the copy existed) or an
  unreadable one;
* a file the role rewrote although both manifests hold the same hash: the host's copy had been
  edited, or a secret filled into it (from Ansible Vault) changed, which no manifest records.

Filter plugins run on the Ansible control host, so clusterforge must be importable by the Python
that runs ``ansible-playbook`` (``clusterforge configure`` runs it from clusterforge's own
environment; with a separate Ansible install, ``pip install clusterforge`` into the Python that
``ansible --version`` names).
"""

from __future__ import annotations

import json
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # imported by the unit tests without Ansible on the path
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]

ORDER = ("restart slurmdbd", "restart slurmctld", "reconfigure", "restart slurmd")


def _policy() -> tuple[Any, Any, Any]:
    try:
        from clusterforge.render import restart
        from clusterforge.render.manifest import Manifest, ManifestError
    except ImportError as exc:
        raise AnsibleFilterError(
            f"the slurm role's restart policy comes from clusterforge, which the Python running Ansible cannot "
            f"import ({exc}); install clusterforge into that Python (`ansible --version` names it) or run "
            "`clusterforge configure`"
        ) from None
    return Manifest, ManifestError, restart


def _text(obj: Any) -> str:
    """A manifest as JSON text: given as text (slurped) or as the parsed object (``from_json``)."""
    if isinstance(obj, bytes):
        return obj.decode()
    if isinstance(obj, str):
        return obj
    return json.dumps(obj)  # Ansible's own dict/list/str types are subclasses of the plain ones


def _file_rule_actions(entry: Any, *, controller: bool, compute: bool, dbd: bool) -> list[str]:
    """The actions of one file's ``on_change`` on a host with these Slurm roles."""
    oc = entry.on_change
    acts = []
    if oc.action == "reconfigure" and controller:
        acts.append("reconfigure")
    if oc.action == "restart":
        acts += [f"restart {d}" for d in oc.restart if (d == "slurmdbd" and dbd) or (d == "slurmctld" and controller)
                 or (d == "slurmd" and compute)]
    return acts


def slurm_plan(
    old: Any, new: Any, changed: Any, *, host: str, controller: bool, compute: bool, dbd: bool,
    host_files: Any = (),
) -> dict[str, list[str]]:
    """Action -> the reasons for it on this host (only the actions to run, in handler order)."""
    manifest_cls, manifest_error, restart = _policy()
    try:
        new_m = manifest_cls.from_text(_text(new), "the render's manifest.json")
    except manifest_error as exc:
        raise AnsibleFilterError(str(exc)) from None
    old_m = None
    old_problem = "no copy of the last install on this host"
    if old:
        try:
            old_m = manifest_cls.from_text(_text(old), "the copy of the last install")
        except manifest_error as exc:
            old_problem = f"unreadable copy of the last install ({exc})"
    changed_names = {str(n) for n in changed or ()}
    unknown = sorted(n for n in changed_names if new_m.file(n) is None)
    if unknown:
        raise AnsibleFilterError(f"changed files {unknown} are not in the render's manifest; render again")
    by_rule: dict[str, str] = {}  # file -> why its file-level rule applies
    by_key: set[str] = set()
    rewritten = "rewritten although the render did not change it (edited on the host, or a secret changed)"
    if old_m is None:
        by_rule = dict.fromkeys(changed_names, old_problem)
    else:
        for name in changed_names:
            before, after = old_m.file(name), new_m.file(name)
            if before is not None and after is not None and before.sha256 == after.sha256:
                by_rule[name] = rewritten
            else:
                by_key.add(name)
        for name in {str(n) for n in host_files or ()} - changed_names:
            before, after = old_m.file(name), new_m.file(name)
            if after is not None and (before is None or before.sha256 != after.sha256):
                by_key.add(name)  # installed by a run that stopped before its handlers ran
    flags = {"controller": bool(controller), "compute": bool(compute), "dbd": bool(dbd)}
    reasons: dict[str, list[str]] = {}
    for name in sorted(by_rule):
        entry = new_m.file(name)
        for act in _file_rule_actions(entry, **flags):
            reasons.setdefault(act, []).append(f"{name}: {by_rule[name]}; file rule: {entry.on_change.why}")
    if by_key and old_m is not None:
        for imp in restart.impacts(old_m, new_m, sorted(by_key)):
            for act in restart.host_actions([imp], host=str(host), **flags):
                reasons.setdefault(act, []).append(f"{imp.file} {imp.subject}: {imp.change} ({imp.cls}: {imp.why})")
    if "restart slurmctld" in reasons:  # a restart reads every file anew: the reconfigure is redundant
        reasons.pop("reconfigure", None)
    return {act: reasons[act] for act in ORDER if act in reasons}


#: The drain reason ``slurm_rollout`` gives: the role resumes only nodes whose reason starts with it,
#: so a drain an operator (or a health check) set is never lifted by a configure run.
DRAIN_PREFIX = "clusterforge configure:"


def slurm_rollout(old: Any, new: Any, *, host: str, compute: bool, host_files: Any = ()) -> dict[str, Any]:
    """What a compute host must do *before* the controller applies a change (site.yml's "prepare" play).

    Compares this host's copy of the last install with the new render (the files whose hashes
    differ, as ``slurm_plan`` does for a run that installed nothing yet) and returns:

    * ``running``: the host has a copy, i.e. it is part of a running cluster (the rollout then goes
      in ``slurm.rollout.batch`` batches; a first run configures every host at once);
    * ``changed``: the render is not the one this host last installed (its copy differs from the new
      manifest, or there is no copy); when no host of the play has a change there is nothing to roll
      out, and the play runs on every host at once (an idempotent re-run pays no batches);
    * ``drain``: the drain reason when the policy drains this node first (its hardware layout or
      GRES lines change: running jobs were placed on the old layout), else ``""``;
    * ``stop_first``: the controller restarts and this drained node's slurmd restarts too: its jobs
      are waited for and slurmd is stopped before slurmctld restarts (stackhpc/ansible-role-openhpc#199).
      A node that is not drained is never stopped: slurmd down longer than SlurmdTimeout marks the
      node DOWN, which kills its jobs; it restarts after the controller instead.
    """
    manifest_cls, manifest_error, restart = _policy()
    from clusterforge import hostlist  # importable: _policy() just imported clusterforge

    out: dict[str, Any] = {"running": bool(old), "changed": True, "drain": "", "stop_first": False}
    if old:
        try:
            out["changed"] = json.loads(_text(old)) != json.loads(_text(new))
        except ValueError:
            pass  # unreadable: a change (slurm_plan reports it; the file rules then apply)
    if not old or not compute:
        return out
    try:
        new_m = manifest_cls.from_text(_text(new), "the render's manifest.json")
        old_m = manifest_cls.from_text(_text(old), "the copy of the last install")
    except manifest_error:
        out["running"] = False
        return out  # slurm_plan reports an unreadable manifest; the file rules then apply
    names = sorted(
        n for n in {str(x) for x in host_files or ()}
        if (a := new_m.file(n)) is not None and ((b := old_m.file(n)) is None or b.sha256 != a.sha256)
    )
    if not names:
        return out
    found = restart.impacts(old_m, new_m, names)
    why = sorted({f"{i.file.rsplit('/', 1)[-1]} {i.change}" for i in found if i.drain_nodes and str(host) in hostlist.expand(i.drain_nodes)})
    if why:
        out["drain"] = f"{DRAIN_PREFIX} {', '.join(why)}"[:200]
        ctld = any(i.cls in (restart.ImpactClass.RESTART_ALL, restart.ImpactClass.RESTART_SLURMCTLD) for i in found)
        slurmd = "restart slurmd" in restart.host_actions(found, host=str(host), controller=False, compute=True,
                                                           dbd=False)
        out["stop_first"] = ctld and slurmd
    return out


def slurm_actions(old: Any, new: Any, changed: Any, **kw: Any) -> list[str]:
    """The handlers this host runs, in handler order (see the module docstring)."""
    return list(slurm_plan(old, new, changed, **kw))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"slurm_actions": slurm_actions, "slurm_plan": slurm_plan, "slurm_rollout": slurm_rollout}
