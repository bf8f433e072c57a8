"""A host's skip decided in Ansible's own process (clusterforge/configure/controller_skip.py).

One playbook of the cases that decide a skip (host-dependent ``when``, magic variables, empty and
non-empty loops, blocks, includes, registers, no_log, delegation, handlers, an undefined variable)
runs through ansible-runner with the real ansible-playbook and the strategy ``configure`` picks,
once with the controller's skips and once with every task sent to a worker
(``CLUSTERFORGE_CONTROLLER_SKIP=0``, Ansible's own behaviour). Every event must be the same. A
filter called from the ``when`` records the process that evaluated it: the controller's alone with
the skips on, a new worker per host and task with them off."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from clusterforge.configure import strategy_env
from clusterforge.configure.controller_skip import active

ansible_runner = pytest.importorskip("ansible_runner")

_INVENTORY = """\
[nodes]
h1 flag=true  items='["a", "b"]'
h2 flag=false items='[]'
h3 flag=true  items='[]'
h4 flag=false items='["c"]'

[nodes:vars]
ansible_connection=local
"""

_PLAY = textwrap.dedent(
    """\
    - hosts: nodes
      gather_facts: false
      tasks:
        - name: host-dependent when
          ansible.builtin.debug: {msg: "flag on {{ inventory_hostname }}"}
          when: (inventory_hostname | where_decided) and flag | bool
          register: first
        - name: a magic variable from the play context
          ansible.builtin.debug: {msg: "{{ ansible_host }}"}
          when: ansible_host is defined
        - name: the search path the worker adds
          ansible.builtin.debug: {msg: "{{ ansible_search_path | length }}"}
          when: ansible_search_path | length > 0
        - name: an empty loop on some hosts
          ansible.builtin.debug: {msg: "item {{ item }}"}
          loop: "{{ items if flag | bool else [] }}"
          register: emptyloop
        - name: a loop with a when per item
          ansible.builtin.debug: {msg: "item {{ item }}"}
          loop: "{{ items }}"
          when: item != 'b'
        - name: registered skip
          ansible.builtin.debug: {msg: ran}
          when: not flag | bool
          register: maybe
        - name: read the registered result
          ansible.builtin.debug: {msg: "skipped={{ maybe is skipped }} keys={{ maybe.keys() | sort }}"}
        - name: every registered skip
          ansible.builtin.debug:
            msg: "{{ {'first': first, 'emptyloop': emptyloop, 'maybe': maybe} | to_json(sort_keys=true) }}"
        - name: a block with a when
          when: flag | bool
          block:
            - name: in the block
              ansible.builtin.debug: {msg: block}
            - name: in the block, with its own when
              ansible.builtin.debug: {msg: inner}
              when: inventory_hostname == 'h1'
        - name: include on some hosts
          ansible.builtin.include_tasks: included.yml
          when: not flag | bool
        - name: a secret task skipped
          ansible.builtin.debug: {msg: "secret {{ inventory_hostname }}"}
          no_log: true
          when: flag | bool
          register: secret
        - name: the secret's registered result
          ansible.builtin.debug:
            msg: "{{ secret.keys() | sort | to_json }} {{ secret.skipped | default(false) }}"
        - name: delegated
          ansible.builtin.debug: {msg: delegated}
          delegate_to: h1
          when: not flag | bool
        - name: notify
          ansible.builtin.debug: {msg: notify}
          changed_when: true
          notify: the handler
        - name: an undefined variable in a when
          ansible.builtin.debug: {msg: never}
          when: no_such_variable | bool
          ignore_errors: true
      handlers:
        - name: the handler
          ansible.builtin.debug: {msg: handled}
          when: flag | bool
    """
)

_INCLUDED = """\
- name: included task
  ansible.builtin.debug: {msg: "included on {{ inventory_hostname }}"}
"""

_FILTER = '''\
import os


def where_decided(host):
    """Record which process evaluated a `when` for which host."""
    with open(os.environ["WHERE_DECIDED"], "a") as fh:
        fh.write(f"{host} {os.getpid()}\\n")
    return True


class FilterModule:
    def filters(self):
        return {"where_decided": where_decided}
'''

_VOLATILE = {"uuid", "counter", "start_line", "end_line", "created", "stdout", "pid", "runner_ident", "parent_uuid"}


def _run(tmp_path: Path, strategy: str, skip_in_controller: bool) -> tuple[list[Any], dict[str, Any], list[tuple[str, str]]]:
    project = tmp_path / f"{strategy}-{int(skip_in_controller)}"
    (project / "filter_plugins").mkdir(parents=True)
    (project / "play.yml").write_text(_PLAY)
    (project / "included.yml").write_text(_INCLUDED)
    (project / "filter_plugins" / "where.py").write_text(_FILTER)
    (project / "hosts.ini").write_text(_INVENTORY)
    (project / "runner").mkdir()
    where = project / "where.txt"
    env = {
        **strategy_env(strategy),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_FORKS": "8",
        "CLUSTERFORGE_CONTROLLER_SKIP": "1" if skip_in_controller else "0",
        "WHERE_DECIDED": str(where),
    }
    r = ansible_runner.run(
        private_data_dir=str(project / "runner"),
        project_dir=str(project),
        playbook=str(project / "play.yml"),
        inventory=str(project / "hosts.ini"),
        envvars=env,
        quiet=True,
        suppress_env_files=True,
        timeout=600,
    )
    assert r.status == "successful", (r.status, r.rc)
    events = []
    for ev in r.events:
        data = ev.get("event_data") or {}
        if not ev.get("event", "").startswith("runner_"):
            continue
        res = json.loads(json.dumps(data.get("res", {}), default=str))
        for key in ("start", "end", "delta"):
            res.pop(key, None)
        events.append((data.get("task"), data.get("host"), ev["event"], json.dumps(res, sort_keys=True)))
    # hosts finish a task in any order; within a task the set of events is what must match
    decided = [tuple(line.split()) for line in where.read_text().splitlines()]
    return sorted(events, key=str), dict(r.stats), decided  # type: ignore[return-value]


@pytest.mark.parametrize("strategy", ["linear", "mitogen"])
def test_the_controller_gives_every_event_a_worker_gives(tmp_path: Path, strategy: str) -> None:
    if strategy == "mitogen":
        pytest.importorskip("ansible_mitogen", reason="pip install mitogen (requirements-ci.txt)")
    assert active(), "the pinned ansible-core is the release controller_skip mirrors"
    with_skip, stats_skip, where_skip = _run(tmp_path, strategy, True)
    without, stats_plain, where_plain = _run(tmp_path, strategy, False)

    assert with_skip == without
    assert stats_skip == stats_plain
    # the play's own expectations, so that two equally wrong runs cannot pass
    by = {(t, h, e): json.loads(r) for t, h, e, r in with_skip}
    registered = {h: json.loads(by[("every registered skip", h, "runner_on_ok")]["msg"]) for h in ("h1", "h2")}
    assert registered["h2"]["first"] == {
        "changed": False,
        "false_condition": "(inventory_hostname | where_decided) and flag | bool",
        "skip_reason": "Conditional result was False",
        "skipped": True,
    }
    assert registered["h1"]["first"]["msg"] == "flag on h1"
    assert registered["h2"]["emptyloop"] == {
        "changed": False,
        "results": [],
        "skipped": True,
        "skipped_reason": "No items in the list",
    }
    assert registered["h1"]["maybe"]["false_condition"] == "not flag | bool"
    assert registered["h2"]["maybe"]["msg"] == "ran"
    assert by[("the secret's registered result", "h2", "runner_on_ok")]["msg"] == (
        '["changed", "false_condition", "skip_reason", "skipped"] True'
    )
    for host in ("h1", "h2", "h3", "h4"):
        assert by[("a magic variable from the play context", host, "runner_on_ok")]["msg"] == host
        assert ("the search path the worker adds", host, "runner_on_ok") in by
    assert ("included task", "h2", "runner_on_ok") in by and ("included task", "h1", "runner_on_ok") not in by
    assert "no_such_variable" in by[("an undefined variable in a when", "h1", "runner_on_failed")]["msg"]
    assert ("the handler", "h1", "runner_on_ok") in by and ("the handler", "h2", "runner_on_skipped") in by
    assert ("delegated", "h2", "runner_on_ok") in by and ("delegated", "h1", "runner_on_skipped") in by
    assert stats_skip["skipped"]["h2"] > 0

    # where the first task's when ran. Without the skips: once per host, each in its own worker.
    assert sorted(h for h, _ in where_plain) == ["h1", "h2", "h3", "h4"]
    assert len({pid for _, pid in where_plain}) == 4
    # With them: every host's in the one controller process first; again in a worker only for
    # h1 and h3, whose when holds, and never for h2 and h4, which skip.
    hosts_by_pid: dict[str, list[str]] = {}
    for host, pid in where_skip:
        hosts_by_pid.setdefault(pid, []).append(host)
    controller = [pid for pid, hosts in hosts_by_pid.items() if sorted(hosts) == ["h1", "h2", "h3", "h4"]]
    assert len(controller) == 1, hosts_by_pid
    workers = sorted(hosts for pid, hosts in hosts_by_pid.items() if pid != controller[0])
    assert workers == [["h1"], ["h3"]], hosts_by_pid


def test_an_unchecked_ansible_release_sends_every_task_to_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import ansible.release

    assert active()
    monkeypatch.setattr(ansible.release, "__version__", "2.20.0")
    assert not active()
    monkeypatch.setattr(ansible.release, "__version__", "2.19.14")
    monkeypatch.setenv("CLUSTERFORGE_CONTROLLER_SKIP", "0")
    assert not active()
