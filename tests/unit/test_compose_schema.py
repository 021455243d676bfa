"""docker-compose.yml is valid against the Compose Specification's JSON schema.

No Docker engine runs where the tests run, so `docker compose config` is not available; the
schema is vendored (tests/fixtures/compose/ORIGIN.md says from where). The topology the file
starts is checked against the inventory and HAProxy in test_compose_topology.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests/fixtures/compose/compose_spec.json"


def _validator():
    schema = json.loads(SCHEMA.read_text())
    assert schema.get("title") == "Compose Specification"
    jsonschema.Draft201909Validator.check_schema(schema)
    return jsonschema.Draft201909Validator(schema)


def _errors(doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(doc)]


def _compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_compose_file_is_valid_against_the_compose_specification():
    assert _errors(_compose()) == []


@pytest.mark.parametrize("break_it", [
    lambda d: d["services"]["haproxy"].update(netwrk_mode="host"),                   # misspelt key
    lambda d: next(iter(d["services"].values())).update(command=42),                # wrong type
    lambda d: next(s for s in d["services"].values() if "healthcheck" in s)["healthcheck"].update(retries="x"),
])
def test_the_schema_check_catches_a_broken_compose_file(break_it):
    doc = copy.deepcopy(_compose())
    break_it(doc)
    assert _errors(doc)
