"""A host's skip decided in Ansible's own process (clusterforge/configure/controller_skip.py).

One playbook of the cases that decide a skip (host-dependent ``when``, magic variables, empty and
non-empty loops, blocks, includes, registers, no_log, delegation, handlers, an undefined variable)
runs through ansible-runner with the real ansible-playbook and the strategy ``configure`` picks,
once with the controller's skips (and the compiled-template cache, template_cache.py) and once
with every task sent to a worker and every template compiled anew (``CLUSTERFORGE_CONTROLLER_SKIP=0
CLUSTERFORGE_TEMPLATE_CACHE=0``, Ansible's own behaviour). Every event must be the same. A
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
          when: (inventory_hostname | where_decided('debug')) and flag | bool
          register: first
        - name: a module's host-dependent when
          ansible.builtin.command: "true"
          changed_when: false
          when: (inventory_hostname | where_decided('module')) and flag | bool
        - name: an argument spec checked, an assert, a fact set
          ansible.builtin.validate_argument_spec:
            argument_spec: {flag: {type: bool, required: true}, items: {type: list, elements: str}}
        - name: an assert on every host
          ansible.builtin.assert:
            that: [items | length < 3, "inventory_hostname is match('h')"]
            quiet: true
        - name: a fact from the host's variables
          ansible.builtin.set_fact:
            doubled: "{{ items + items }}"
        - name: the fact, read back
          ansible.builtin.debug: {msg: "{{ doubled | join(',') }}"}
        - name: an assert that fails on one host
          ansible.builtin.assert:
            that: inventory_hostname != 'h4'
            fail_msg: "h4 refused"
          ignore_errors: true
        - name: a loop over local actions
          ansible.builtin.debug: {msg: "{{ item }} on {{ inventory_hostname }}"}
          loop: [1, 2]
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
        - name: a block whose ignore_errors is templated for each host
          ignore_errors: "{{ inventory_hostname == 'h4' }}"
          block:
            - name: fails on h4 only, which the block ignores
              ansible.builtin.assert:
                that: inventory_hostname != 'h4'
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
        - name: a template with its own delimiters
          ansible.builtin.debug:
            msg: "#jinja2:variable_start_string:'[%', variable_end_string:'%]'\\n[% inventory_hostname %] {{ inventory_hostname }}"
        - name: the same text with the default delimiters
          ansible.builtin.debug:
            msg: "[% inventory_hostname %] {{ inventory_hostname }}"
        - name: a syntax error on every host
          ansible.builtin.debug: {msg: "{{ inventory_hostname + }}"}
          ignore_errors: true
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


def where_decided(host, task):
    """Record which process evaluated a task's `when` for which host, and whether it compiled
    through clusterforge's template cache."""
    try:
        from clusterforge.configure import template_cache
        cached = int(template_cache._installed)
    except ImportError:
        cached = -1
    with open(os.environ["WHERE_DECIDED"], "a") as fh:
        fh.write(f"{task} {host} {os.getpid()} {cached}\\n")
    return True


class FilterModule:
    def filters(self):
        return {"where_decided": where_decided}
'''

_VOLATILE = {"uuid", "counter", "start_line", "end_line", "created", "stdout", "pid", "runner_ident", "parent_uuid"}


def _run(tmp_path: Path, strategy: str, skip_in_controller: bool) -> tuple[list[Any], dict[str, Any], list[tuple[str, str, str]]]:
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
        # the plain run is Ansible's own: no compiled-template cache (template_cache.py) and a
        # worker for every task that does not skip (controller_run.py) either
        "CLUSTERFORGE_TEMPLATE_CACHE": "1" if skip_in_controller else "0",
        "CLUSTERFORGE_CONTROLLER_RUN": "1" if skip_in_controller else "0",
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
    lines = [line.split() for line in where.read_text().splitlines()]
    assert {cached for *_, cached in lines} == {"1" if skip_in_controller else "0"}, lines
    decided = [(task, host, pid) for task, host, pid, _ in lines]
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
        "false_condition": "(inventory_hostname | where_decided('debug')) and flag | bool",
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
    for host in ("h1", "h2", "h3", "h4"):  # one compiled template each, never another host's
        assert by[("a template with its own delimiters", host, "runner_on_ok")]["msg"] == f"{host} {{{{ inventory_hostname }}}}"
        assert by[("the same text with the default delimiters", host, "runner_on_ok")]["msg"] == f"[% inventory_hostname %] {host}"
        assert "Syntax error in template" in by[("a syntax error on every host", host, "runner_on_failed")]["msg"]
    assert ("the handler", "h1", "runner_on_ok") in by and ("the handler", "h2", "runner_on_skipped") in by
    assert ("delegated", "h2", "runner_on_ok") in by and ("delegated", "h1", "runner_on_skipped") in by
    assert stats_skip["skipped"]["h2"] > 0

    # the local actions' own results, from the controller as from a worker
    for host in ("h1", "h2", "h3", "h4"):
        assert ("an argument spec checked, an assert, a fact set", host, "runner_on_ok") in by
        assert ("an assert on every host", host, "runner_on_ok") in by
        assert ("a loop over local actions", host, "runner_on_ok") in by
    assert by[("the fact, read back", "h1", "runner_on_ok")]["msg"] == "a,b,a,b"
    assert by[("the fact, read back", "h2", "runner_on_ok")]["msg"] == ""
    assert by[("an assert that fails on one host", "h4", "runner_on_failed")]["msg"] == "h4 refused"
    assert ("a loop over local actions", "h3", "runner_item_on_ok") in by

    # Where each `when` ran. Without clusterforge's strategy code: once per host, each in its own
    # worker, for the debug task and the module alike.
    for task in ("debug", "module"):
        runs = [(h, pid) for t, h, pid in where_plain if t == task]
        assert sorted(h for h, _ in runs) == ["h1", "h2", "h3", "h4"]
        assert len({pid for _, pid in runs}) == 4
    # With it: every host's skip is decided in the one controller process. The module then runs
    # in a worker for h1 and h3, whose when holds (which evaluates it again), never for h2 and h4.
    # The debug task needs no host, so it runs in the controller too: no worker at all.
    module_by_pid: dict[str, list[str]] = {}
    for t, host, pid in where_skip:
        if t == "module":
            module_by_pid.setdefault(pid, []).append(host)
    controller = [pid for pid, hosts in module_by_pid.items() if sorted(hosts) == ["h1", "h2", "h3", "h4"]]
    assert len(controller) == 1, module_by_pid
    workers = sorted(hosts for pid, hosts in module_by_pid.items() if pid != controller[0])
    assert workers == [["h1"], ["h3"]], module_by_pid
    debug = [(h, pid) for t, h, pid in where_skip if t == "debug"]
    assert {pid for _, pid in debug} == set(controller), debug
    assert sorted(h for h, _ in debug) == ["h1", "h1", "h2", "h3", "h3", "h4"]


def test_an_unchecked_ansible_release_sends_every_task_to_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import ansible.release

    assert active()
    monkeypatch.setattr(ansible.release, "__version__", "2.20.0")
    assert not active()
    monkeypatch.setattr(ansible.release, "__version__", "2.19.14")
    monkeypatch.setenv("CLUSTERFORGE_CONTROLLER_SKIP", "0")
    assert not active()


def test_a_controller_run_task_gets_its_own_blocks_without_their_other_tasks() -> None:
    """controller_run.own_copy: the executor's post_validate sets templated values on the blocks
    above a task, so each host's copy needs its own blocks; their other tasks it must not copy
    (a plain Task.copy() duplicates the whole block for every host and task)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play import Play
    from ansible.plugins.loader import init_plugin_loader
    from ansible.vars.manager import VariableManager

    from clusterforge.configure.controller_run import own_copy

    init_plugin_loader([])
    loader = DataLoader()
    play = Play.load(
        {
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "outer",
                    "vars": {"who": "{{ inventory_hostname }}"},
                    "block": [
                        {
                            "name": "inner",
                            "when": "flag | bool",
                            "block": [{"name": f"t{i}", "ansible.builtin.debug": {"msg": "{{ who }}"}} for i in range(5)],
                        },
                        {"name": "after", "ansible.builtin.debug": {"msg": "after"}},
                    ],
                }
            ],
        },
        variable_manager=VariableManager(loader=loader),
        loader=loader,
    )
    outer = next(b for b in play.compile() if b.name == "outer")
    inner = outer.block[0]
    assert [t.name for t in inner.block] == [f"t{i}" for i in range(5)] and inner._parent is outer
    task = inner.block[2]

    own = own_copy(task)

    assert own is not task and own._uuid == task._uuid and own.name == "t2"
    parent = own._parent
    assert parent is not inner, "the block is shared: post_validate would set one host's values on it"
    assert parent._parent is not outer, "the block above it is shared"
    # the blocks' task lists still name the strategy's own tasks: none of them was copied
    assert all(a is b for a, b in zip(parent.block, inner.block, strict=True)), "the block's tasks were copied"
    assert all(a is b for a, b in zip(parent._parent.block, outer.block, strict=True)), "the outer block's tasks were copied"
    assert parent.when == inner.when == ["flag | bool"]
    assert own.get_vars()["who"] == "{{ inventory_hostname }}"  # the outer block's vars still reach it
    parent.when = ["changed on the copy"]
    assert inner.when == ["flag | bool"] and len(inner.block) == 5 and len(outer.block) == 2
