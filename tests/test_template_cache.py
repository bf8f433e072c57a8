"""clusterforge/configure/template_cache.py: each template string compiled once per process.

In-process, with ansible-core's own ``Templar``: every result with the cache is the result
without it, across hosts' variables, conditionals, ``#jinja2:`` overrides, compile errors and base
folders; and what is shared is exactly what the key says. The whole-playbook comparison (every
event with and without the cache and the controller's skips) is
``tests/test_controller_skip.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ansible")

from ansible._internal._templating._engine import TemplateEngine, TemplateOptions
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from clusterforge.configure import template_cache

TEMPLATES = [
    "{{ a + 1 }}",
    "{{ names | map('upper') | join(',') }}",
    "{% for n in names %}{{ n }}={{ a }};{% endfor %}",
    "#jinja2:variable_start_string:'[%', variable_end_string:'%]'\n[% a %] {{ a }}",
    "[% a %] {{ a }}",
    "{{ range(a) | list | length * 2 }}",
]
CONDITIONALS = ["a > 3", "'x' in names", "names | length == 2 and a is odd"]
VARIABLES = [{"a": 1, "names": ["x", "y"]}, {"a": 5, "names": ["p"]}, {"a": 4, "names": ["x", "z"]}]


def _results(basedir: str | None = None) -> list[object]:
    out: list[object] = []
    for variables in VARIABLES:
        loader = DataLoader()
        if basedir:
            loader.set_basedir(basedir)
        templar = Templar(loader=loader, variables=variables)
        out += [templar.template(trust_as_template(t)) for t in TEMPLATES]
        out += [templar.evaluate_conditional(trust_as_template(c)) for c in CONDITIONALS]
        for bad in ("{{ a + }}", "{% if %}"):
            with pytest.raises(AnsibleError) as err:
                templar.template(trust_as_template(bad))
            out.append(str(err.value).splitlines()[0])
    return out


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The cache installed for one test, and ansible-core's own compiles put back after it."""
    monkeypatch.setattr(TemplateEngine, "_compile_template", TemplateEngine._compile_template)
    monkeypatch.setattr(TemplateEngine, "_compile_expression", TemplateEngine._compile_expression)
    monkeypatch.setattr(template_cache, "_installed", False)
    monkeypatch.setattr(template_cache, "stats", {"compiled": 0, "reused": 0})
    monkeypatch.delenv(template_cache.ENV_SWITCH, raising=False)
    assert template_cache.install()
    return template_cache.stats


def test_every_result_is_the_uncached_result() -> None:
    plain = _results()
    assert plain[:9] == [2, "X,Y", "x=1;y=1;", "1 {{ a }}", "[% a %] 1", 2, False, True, True]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TemplateEngine, "_compile_template", TemplateEngine._compile_template)
        mp.setattr(TemplateEngine, "_compile_expression", TemplateEngine._compile_expression)
        mp.setattr(template_cache, "_installed", False)
        mp.delenv(template_cache.ENV_SWITCH, raising=False)
        assert template_cache.install()
        cached = _results()
    assert cached == plain


def test_a_string_is_compiled_once_for_every_host(cache: dict[str, int]) -> None:
    _results()
    # 6 templates + 3 conditionals compiled for the first variables, then reused for the other
    # two; the two syntax errors are compiled at every use (a deferred error is never cached)
    assert cache["compiled"] == 9 + 2 * 3
    assert cache["reused"] == 9 * 2


def test_overrides_and_base_folders_are_part_of_the_key(cache: dict[str, int], tmp_path: Path) -> None:
    templar = Templar(loader=DataLoader(), variables={"a": 7})
    assert templar.template(trust_as_template(TEMPLATES[3])) == "7 {{ a }}"
    assert templar.template(trust_as_template(TEMPLATES[4])) == "[% a %] 7"
    assert cache == {"compiled": 2, "reused": 0}
    (tmp_path / "inc.j2").write_text("included {{ a }}")
    other = DataLoader()
    other.set_basedir(str(tmp_path))
    inc = "{% include 'inc.j2' %}"
    assert Templar(loader=other, variables={"a": 3}).template(trust_as_template(inc)) == "included 3"
    assert cache == {"compiled": 3, "reused": 0}
    # the same text under another base folder is its own entry, whose include finds nothing
    with pytest.raises(AnsibleError):
        Templar(loader=DataLoader(), variables={"a": 3}).template(trust_as_template(inc))
    assert cache["reused"] == 0


def test_compile_options_are_part_of_the_key(cache: dict[str, int]) -> None:
    engine = TemplateEngine(loader=DataLoader(), variables={"a": 2})
    for options in (TemplateOptions.DEFAULT, TemplateOptions(escape_backslashes=False), TemplateOptions.DEFAULT):
        assert engine.template(trust_as_template("{{ a }}"), options=options) == 2
    assert cache == {"compiled": 2, "reused": 1}


def test_an_unhashable_option_compiles_as_before(cache: dict[str, int]) -> None:
    engine = TemplateEngine(loader=DataLoader(), variables={"a": 2})
    options = TemplateOptions(value_for_omit=[])  # a list: no key can hold it
    assert engine.template(trust_as_template("{{ a }}"), options=options) == 2
    assert engine.template(trust_as_template("{{ omit }}"), options=options) == []
    assert cache == {"compiled": 0, "reused": 0}


def test_off_by_switch_and_on_unchecked_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    import ansible.release

    monkeypatch.setattr(template_cache, "_installed", False)
    monkeypatch.setenv(template_cache.ENV_SWITCH, "0")
    assert not template_cache.install()
    monkeypatch.delenv(template_cache.ENV_SWITCH)
    monkeypatch.setattr(ansible.release, "__version__", "2.20.0")
    assert not template_cache.install()
