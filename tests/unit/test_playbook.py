"""Playbook loading: valid files, and errors naming file, line and field."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

import pytest
from pydantic import BaseModel, ConfigDict

from dbmigrate.engine import FunctionStep, Journal, EventBus, Phase, Procedure, RunContext
from dbmigrate.exceptions import ConfigError
from dbmigrate.playbook import load_playbook
from dbmigrate.procedures import registry
from dbmigrate.yamlload import load_yaml_with_lines


class DemoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    candidate: str
    max_lag_s: float = 5.0


def lag_gate(ctx, params):
    return (ctx.resources.lag <= params.max_lag_s, "lag check", {})


def build_demo(ctx, params):
    noop = lambda ctx: "ok"  # noqa: E731
    return Procedure("demo", [Phase("preflight", [FunctionStep("look", noop, mutating=False)]),
                              Phase("cutover", [FunctionStep(f"promote {params.candidate}", noop)])])


@pytest.fixture(autouse=True)
def demo_procedure(monkeypatch):
    entry = registry.ProcedureEntry("demo", build_demo, params=DemoParams, gates={"replica-lag": lag_gate})
    monkeypatch.setitem(registry._REGISTRY, "demo", entry)


@pytest.fixture
def write(tmp_path, monkeypatch):
    """Write playbooks/x.yaml under a temporary cwd and return its relative path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "playbooks").mkdir()

    def _write(text: str, name: str = "x.yaml") -> str:
        path = f"playbooks/{name}"
        (tmp_path / path).write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    return _write


def error_of(path: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_playbook(path)
    assert caught.value.exit_code == 2
    return caught.value.message


VALID = """
procedure: demo
inventory: ../inventories/prod.yaml
cluster: main
params:
  candidate: db-2
gates:
  - {name: go-ahead, kind: manual, before: cutover, prompt: "Cut over now?"}
  - {name: replica-lag, kind: auto, before: cutover}
hooks:
  before_phase: [./hooks/notify.sh]
  on_failure: [[pager, --severity, high]]
  timeout_s: 10
guard: {window_s: 300, min_samples: 20, rules: [{metric: p99, max_ratio: 1.5}], custom_knob: 2}
journal: state/journal.sqlite
"""


def test_valid_playbook_loads_with_resolved_paths_and_typed_params(write, tmp_path):
    playbook = load_playbook(write(VALID))
    assert playbook.procedure == "demo" and playbook.cluster == "main"
    assert playbook.params == DemoParams(candidate="db-2")
    assert playbook.inventory_path == tmp_path / "inventories/prod.yaml"
    assert playbook.journal_path == tmp_path / "playbooks/state/journal.sqlite"
    assert playbook.spec.guard.window_s == 300 and playbook.spec.guard.model_extra == {"custom_knob": 2}
    assert playbook.spec.dry_run is False
    runner = playbook.hook_runner()
    assert runner.timeout_s == 10
    assert runner.commands["before_phase"][0].argv == (str(tmp_path / "playbooks/hooks/notify.sh"),)


def test_playbook_gates_are_attached_to_their_phase(write):
    playbook = load_playbook(write(VALID))
    with Journal(":memory:") as journal:
        ctx = RunContext(run_id="r", procedure="demo", cluster="main", journal=journal, bus=EventBus(),
                         resources=SimpleNamespace(lag=9.0))
        procedure = playbook.build(ctx)
        gates = procedure.phase("cutover").gates
        assert [(g.name, g.kind) for g in gates] == [("go-ahead", "manual"), ("replica-lag", "auto")]
        assert gates[0].prompt == "Cut over now?"
        assert gates[1].evaluate(ctx) == (False, "lag check", {})  # 9.0 > max_lag_s 5.0
        assert procedure.phase("preflight").gates == []


def test_invalid_gate_kind(write):
    path = write("""
        procedure: demo
        cluster: main
        params: {candidate: db-2}
        gates:
          - {name: go, kind: manual, before: cutover}
          - name: lag
            kind: maybe
            before: cutover
        """)
    assert error_of(path) == "playbooks/x.yaml:7: gates[1].kind: 'maybe' is not valid; expected one of manual, auto"


def test_unknown_top_level_key_lists_valid_keys(write):
    path = write("""
        procedure: demo
        cluster: main
        clustre: other
        params: {candidate: db-2}
        """)
    assert error_of(path) == (
        "playbooks/x.yaml:3: clustre: unknown key 'clustre'; valid keys: procedure, cluster, inventory, params, "
        "gates, guard, hooks, journal, dry_run")


def test_unknown_nested_key_lists_the_keys_valid_there(write):
    path = write("""
        procedure: demo
        cluster: main
        params: {candidate: db-2}
        hooks:
          before_phse: [./notify.sh]
        """)
    assert error_of(path) == ("playbooks/x.yaml:5: hooks.before_phse: unknown key 'before_phse'; valid keys: "
                              "before_phase, after_phase, on_success, on_failure, timeout_s")


def test_yaml_syntax_error_names_the_line(write):
    path = write("""
        procedure: demo
        cluster: main
        params:
          candidate: db-2
         max_lag_s: 3
        """)
    message = error_of(path)
    assert message.startswith("playbooks/x.yaml:5: YAML syntax error: ")


def test_duplicate_keys_are_refused_with_both_lines(write):
    path = write("""
        procedure: demo
        cluster: main
        params:
          candidate: db-2
          candidate: db-3
        """)
    assert error_of(path) == (
        "playbooks/x.yaml:5: params.candidate: duplicate key 'candidate' (first defined on line 4)")


def test_missing_required_key_points_at_the_enclosing_mapping(write):
    path = write("""
        procedure: demo
        params: {candidate: db-2}
        gates:
          - {name: go, before: cutover}
        """)
    assert error_of(path).splitlines() == [
        "playbooks/x.yaml:1: cluster: required key 'cluster' is missing",
        "playbooks/x.yaml:4: gates[0].kind: required key 'kind' is missing",
    ]


def test_procedure_params_are_validated_by_the_procedure_model(write):
    path = write("""
        procedure: demo
        cluster: main
        params:
          candidate: db-2
          max_lag_s: fast
          max_lag: 3
        """)
    assert error_of(path).splitlines() == [
        "playbooks/x.yaml:5: params.max_lag_s: 'fast' is not valid: input should be a valid number, "
        "unable to parse string as a number",
        "playbooks/x.yaml:6: params.max_lag: unknown key 'max_lag'; valid keys: candidate, max_lag_s",
    ]


def test_unknown_procedure_lists_the_known_ones(write):
    path = write("""
        cluster: main
        procedure: promot
        """)
    message = error_of(path)
    assert message.startswith("playbooks/x.yaml:2: procedure: 'promot' is not a known procedure; expected one of ")
    assert "demo" in message


def test_auto_gate_must_come_from_the_procedure_library(write):
    path = write("""
        procedure: demo
        cluster: main
        params: {candidate: db-2}
        gates:
          - {name: replica-lga, kind: auto, before: cutover}
        """)
    assert error_of(path) == (
        "playbooks/x.yaml:5: gates[0].name: 'replica-lga' is not an automatic gate of demo; "
        "expected one of replica-lag")


def test_gate_before_an_unknown_phase_is_reported_when_built(write):
    playbook = load_playbook(write("""
        procedure: demo
        cluster: main
        params: {candidate: db-2}
        gates:
          - name: go
            kind: manual
            before: cutovr
        """))
    with Journal(":memory:") as journal, pytest.raises(ConfigError) as caught:
        playbook.build(RunContext(run_id="r", procedure="demo", cluster="main", journal=journal, bus=EventBus()))
    assert caught.value.message == (
        "playbooks/x.yaml:7: gates[0].before: 'cutovr' is not a phase of demo; expected one of preflight, cutover")


def test_wrong_shapes_say_what_was_expected(write):
    path = write("""
        procedure: demo
        cluster: main
        params: {candidate: db-2}
        gates: {name: go}
        dry_run: perhaps
        hooks:
          on_failure: [[], 5]
        """)
    assert error_of(path).splitlines() == [
        "playbooks/x.yaml:4: gates: expected a list, got a mapping",
        "playbooks/x.yaml:5: dry_run: 'perhaps' is not valid: input should be a valid boolean, "
        "unable to interpret input",
        "playbooks/x.yaml:7: hooks.on_failure[0]: list should have at least 1 item after validation, not 0",
        "playbooks/x.yaml:7: hooks.on_failure[1]: expected a string or a list, got int 5",
    ]


@pytest.mark.parametrize("text, expected", [
    ("", "playbooks/x.yaml:1: expected a mapping with keys procedure, cluster, inventory, params, gates, guard, "
         "hooks, journal, dry_run; got an empty file"),
    ("- procedure: demo\n", "playbooks/x.yaml:1: expected a mapping with keys procedure, cluster, inventory, "
                            "params, gates, guard, hooks, journal, dry_run; got a list"),
])
def test_a_playbook_must_be_a_mapping(write, text, expected):
    assert error_of(write(text)) == expected


def test_missing_file_is_a_config_error(write):
    assert error_of("playbooks/nope.yaml") == "playbooks/nope.yaml: no such file"


def test_locator_maps_nested_paths_to_lines(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("servers:\n  - name: db-1\n    port: 3306\n  - name: db-2\n")
    data, locate = load_yaml_with_lines(path)
    assert data == {"servers": [{"name": "db-1", "port": 3306}, {"name": "db-2"}]}
    assert locate(("servers", 0, "port")) == 3
    assert locate(("servers", 1)) == 4
    assert locate(("servers", 1, "port")) == 4  # missing: the enclosing item
