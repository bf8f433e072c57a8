"""What the controller pays, per host and run, to find a role's file already written: the text as a
role variable, or a template lookup of the same text.

    python3 benchmarks/file_checks.py [--calls 50]

The common role's limits and kernel settings and the slurm role's apt pin are skipped when site.yml's
Facts play read them as the role would write them (``__common_limits_as_wanted``,
``__common_sysctl_as_wanted``, ``__slurm_pin_as_wanted``). That comparison needs the SHA-256 of the
text the role writes, on the controller, for every host on every run. The texts were template files,
hashed through ``lookup('ansible.builtin.template', ...)``; that lookup deep-copies every variable
the template can see before it renders, the host's facts and the Facts play's read among them. They
are now role variables (``__common_limits_text``, ``__common_sysctl_text``, ``__slurm_pin_text``),
which the copy writes and the comparison hashes.

For one inventory host that has this machine's own Facts-play read (its dpkg list, read by the play's
own command, as ``benchmarks/package_list.py`` runs it), with both roles' defaults and vars loaded as
Ansible loads them and ansible-core's own ``Templar`` over ``VariableManager.get_vars``, this prints
the median of ``--calls`` evaluations, in milliseconds, of:

* each role's comparison as it is now (``__*_as_wanted``), which hashes the variable's text;
* the same comparison with the text's SHA-256 taken through a template lookup instead, as before:
  the variable's text written to a template file, as the roles' template files held it (the two
  hashes, and the two answers, must agree, or the script stops).

Then the sum per host and run, and the load average before and after. No host is contacted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import package_list  # noqa: E402
import role_templating  # noqa: E402

# file: (role, the comparison, the text it hashes)
CHECKS = {
    "limits": ("common", "__common_limits_as_wanted", "__common_limits_text"),
    "sysctl": ("common", "__common_sysctl_as_wanted", "__common_sysctl_text"),
    "slurm pin": ("slurm", "__slurm_pin_as_wanted", "__slurm_pin_text"),
}


def _median_ms(templar: Any, expr: str, calls: int) -> tuple[Any, float]:
    got, times = None, []
    for _ in range(calls):
        got, took = role_templating.timed(templar, expr)
        times.append(took)
    return got, statistics.median(times) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    from ansible.template import Templar

    role_templating.start_ansible(REPO / "roles" / "slurm")
    load = os.getloadavg()[0]
    read = package_list._dpkg_read()  # this machine's read, by the Facts play's own command
    data = {"all": {"vars": {"clusterforge_slurm_version": "24.11"},
                    "children": {"slurm_compute": {"hosts": {"h1": {}}}}}}
    rows = []
    with role_templating.inventory(data) as (loader, inv, vm), tempfile.TemporaryDirectory() as tmp:
        roles: dict[str, Any] = {}
        for role in ("common", "slurm"):
            for kind in ("defaults", "vars"):
                roles.update(role_templating.role_file(loader, REPO / "roles" / role / kind / "main.yml"))
        # what the Facts play's "Keep what the host has" sets on a host (site.yml)
        vm.set_nonpersistent_facts("h1", {
            "clusterforge_installed_packages": read["installed"], "clusterforge_held_packages": read["held"],
            "clusterforge_apt_index_age_s": read["apt_index_age_s"], "clusterforge_active_units": read["active_units"],
            "clusterforge_static_hostname": read["static_hostname"], "clusterforge_file_states": read.get("files", {}),
            "clusterforge_daemon_releases": {}})
        templar = Templar(loader=loader, variables={**roles, **vm.get_vars(host=inv.get_host("h1"))})
        for name, (_role, judge, text_var) in CHECKS.items():
            text = templar.template(roles[text_var])
            template = Path(tmp) / f"{text_var}.j2"
            template.write_text(roles[text_var])  # the text, as a template file held it
            lookup = f"lookup('ansible.builtin.template', '{template}')"
            by_lookup, _ = _median_ms(templar, f"{{{{ {lookup} | hash('sha256') }}}}", 3)
            by_var, _ = _median_ms(templar, f"{{{{ {text_var} | hash('sha256') }}}}", 3)
            if by_lookup != by_var:
                raise SystemExit(f"{name}: the lookup and the variable give other bytes:\n{text}")
            # the role's comparison, and the same with the text's hash taken through the lookup
            as_before = str(roles[judge]).replace(f"{text_var} | hash", f"{lookup} | hash")
            if as_before == str(roles[judge]):
                raise SystemExit(f"{judge} no longer hashes {text_var}: this benchmark needs updating")
            judged, judge_ms = _median_ms(templar, roles[judge], args.calls)
            judged_before, before_ms = _median_ms(templar, as_before, args.calls)
            if judged != judged_before:
                raise SystemExit(f"{judge}: {judged!r} with the variable, {judged_before!r} with the lookup")
            rows.append((name, judge, judge_ms, before_ms))
    print(f"one host's check of a written file on the controller, median of {args.calls} evaluations"
          f" (the host's variables hold this machine's dpkg read: {len(read['installed'])} keys)")
    print(f"  {'file':<10} {'the comparison':<30} {'text a variable':>16}   {'text by a template lookup':>26}")
    for name, judge, judge_ms, lookup_ms in rows:
        print(f"  {name:<10} {judge:<30} {judge_ms:13.2f} ms   {lookup_ms:23.2f} ms")
    now, before = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"  {'per host and run':<41} {now:13.2f} ms   {before:23.2f} ms")
    print(f"  machine: {os.cpu_count()} CPUs, load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
