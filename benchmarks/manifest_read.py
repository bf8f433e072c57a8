"""What naming the render's manifest costs Ansible's controller, with and without site.yml's once-read.

    python3 benchmarks/manifest_read.py [--specs examples/local.yaml,examples/p5-training.yaml] [--repeat 20]

The roles that copy rendered files (slurm, monitoring, dcgm, nccl, cloud_agents) read the render's
``manifest.json`` through a variable (``__slurm_manifest``, ...) that many others name: the slurm
role's user, folders and daemons (``__slurm_layout``), its file list (``__slurm_files``). Each
template that names one, for every host and task whose ``when``, loop or arguments hold it, is
evaluated on the controller's one thread. Before site.yml's Facts play read the manifest once for
the play's hosts (``clusterforge_manifest_read``), each such evaluation was a file lookup and a JSON
parse of the whole manifest.

For each spec, rendered into a temporary folder with ``clusterforge render``, this prints the
manifest's size and, with the slurm role's own defaults and vars file loaded as Ansible loads them
and ansible-core's own ``Templar`` over a host's ``VariableManager.get_vars``, the median of
``--repeat`` evaluations of:

* ``__slurm_user`` (one value of the manifest's Slurm layout, the cheapest use);
* ``__slurm_files`` (a host's file list: the manifest's files selected by group and pattern);

each without the once-read (a role run alone: the file read and parsed) and with it (site.yml's
own task, templated once and set on the host as a run-once ``set_fact``'s result is), plus what
the once-read itself cost. With the once-read, two more pairs, each the role's way before and now:

* the file list as Jinja's two ``selectattr`` tests per entry, against the ``manifest_files``
  filter ``__slurm_files`` uses now (the same list: asserted);
* the restart policy's ``slurm_plan`` handed the parsed manifest (``__slurm_manifest``), which the
  filter serializes again through Ansible's lazy templating, against its JSON text
  (``__slurm_manifest_text``; the same plan: asserted).

No host is contacted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import role_templating

REPO = Path(__file__).resolve().parents[1]
ROLE = REPO / "roles" / "slurm"
ONCE_TASK = "Read the render's manifest once for the play's hosts"
# the slurm role's file list as it was written before manifest_files
SELECTATTR = ("{{ __slurm_manifest.files | selectattr('node_groups', 'contains', clusterforge_node_group)"
              " | selectattr('name', 'match', slurm_manifest_pattern) | list }}")
# roles/slurm/tasks/config.yml's plan on a host whose copy of the last install is this manifest
PLAN = ("{{{{ __slurm_manifest_text | slurm_plan({manifest}, [], host=inventory_hostname, controller=true,"
        " compute=true, dbd=false, host_files=__slurm_files | map(attribute='name') | list) }}}}")


def _once_task(loader: Any) -> dict[str, Any]:
    """site.yml's own task, loaded as Ansible loads the playbook (its strings trusted as templates)."""
    plays = loader.load_from_file(str(REPO / "playbooks" / "site.yml"), trusted_as_template=True)
    facts = next(p for p in plays if p.get("name") == "Facts")
    task: dict[str, Any] = next(t for t in facts["tasks"] if t.get("name") == ONCE_TASK)
    return task


def _render(spec: Path, out: Path) -> Path:
    proc = subprocess.run(
        [sys.executable, "-m", "clusterforge.cli", "render", str(spec), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"render of {spec} failed:\n{proc.stdout}{proc.stderr}")
    return out / "manifest.json"


def _median(templar: Any, expr: str, repeat: int) -> tuple[Any, float]:
    got, times = None, []
    for _ in range(repeat):
        got, took = role_templating.timed(templar, expr)
        times.append(took)
    return got, statistics.median(times)


def _measure(spec: Path, repeat: int) -> dict[str, Any]:
    from ansible.template import Templar, trust_as_template

    with tempfile.TemporaryDirectory(prefix="cf-manifest-read-") as tmp:
        manifest = _render(spec, Path(tmp) / "render")
        files = json.loads(manifest.read_text())["files"]
        # the host's group: the one most of the manifest's files are for
        group = Counter(g for f in files for g in f["node_groups"]).most_common(1)[0][0]
        data = {"all": {"hosts": {"h1": {"clusterforge_manifest_dir": str(manifest.parent),
                                         "clusterforge_node_group": group}}}}
        with role_templating.inventory(data) as (loader, inv, vm):
            role = {**role_templating.role_file(loader, ROLE / "defaults" / "main.yml"),
                    **role_templating.role_file(loader, ROLE / "vars" / "main.yml")}
            host = inv.get_host("h1")

            def templar() -> Templar:
                return Templar(loader=loader, variables={**role, **vm.get_vars(host=host)})

            alone = templar()
            user, user_alone = _median(alone, "{{ __slurm_user }}", repeat)
            listed, files_alone = _median(alone, "{{ __slurm_files }}", repeat)
            # site.yml's task (with its own vars), as the strategy applies a run-once set_fact's result
            # to the play's hosts
            task = _once_task(loader)
            with_task = Templar(loader=loader, variables={**role, **vm.get_vars(host=host), **task.get("vars", {})})
            facts, once = role_templating.timed_facts(with_task, task["ansible.builtin.set_fact"])
            vm.set_nonpersistent_facts("h1", facts)
            read = templar()
            user_read, user_once = _median(read, "{{ __slurm_user }}", repeat)
            listed_read, files_once = _median(read, "{{ __slurm_files }}", repeat)
            assert user_read == user and listed_read == listed, "the once-read gives another manifest"
            assert read.template(trust_as_template("{{ clusterforge_manifest_read.path }}")) == str(manifest)
            selected, files_jinja = _median(read, SELECTATTR, repeat)
            assert selected == listed_read, "manifest_files gives another list than selectattr"
            plan_data, plan_parsed = _median(read, PLAN.format(manifest="__slurm_manifest"), repeat)
            plan_text, plan_as_text = _median(read, PLAN.format(manifest="__slurm_manifest_text"), repeat)
            assert plan_text == plan_data, "slurm_plan plans otherwise given the manifest's text"
        return {"files": len(files), "kib": manifest.stat().st_size / 1024, "listed": len(listed),
                "user": (user_alone, user_once), "list": (files_alone, files_once), "once": once,
                "select": (files_jinja, files_once), "plan": (plan_parsed, plan_as_text)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specs", default="examples/local.yaml,examples/p5-training.yaml,examples/onprem-dgx.yaml")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    role_templating.start_ansible(ROLE)
    load = os.getloadavg()
    print(f"the slurm role's manifest variables on the controller, one evaluation (median of {args.repeat}):"
          " read by the template itself / from site.yml's once-read")
    print("  spec                  files    KiB   __slurm_user (ms)   __slurm_files (ms)   the once-read")
    found = {spec: _measure(REPO / spec, args.repeat) for spec in args.specs.split(",")}
    for spec, f in found.items():
        print(f"  {Path(spec).name:<20} {f['files']:6d} {f['kib']:6.0f}   {f['user'][0] * 1000:7.2f} / {f['user'][1] * 1000:5.2f}"
              f"   {f['list'][0] * 1000:8.2f} / {f['list'][1] * 1000:5.2f}   {f['once'] * 1000:9.2f} ms")
    print("with the once-read, the role's way before / now (ms):")
    print("  spec                  __slurm_files: selectattr / manifest_files   slurm_plan: parsed / JSON text")
    for spec, f in found.items():
        print(f"  {Path(spec).name:<20}                {f['select'][0] * 1000:8.2f} / {f['select'][1] * 1000:5.2f}"
              f"                   {f['plan'][0] * 1000:6.2f} / {f['plan'][1] * 1000:5.2f}")
    print(f"  machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
