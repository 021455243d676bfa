"""The package keeps its shape: layers, no SQL outside db/, no cycles, no borrowed private names.

Every rule runs on the real tree, and on a synthetic violation that proves it can fail.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tests.unit import archrules as rules
from tests.unit.archrules import Allowed

ROOT = Path(__file__).resolve().parents[2]

ALLOWED_SQL = [
    Allowed("dbmigrate/engine/journal.py", None,
            "the run journal is a local SQLite file, not a MySQL/MariaDB server"),
    Allowed("dbmigrate/rehearsal/verify/writer.py", None,
            "the zero-loss verifier stands in for the application: it writes through the router as an app does"),
    Allowed("dbmigrate/rehearsal/verify/shard_writer.py", None,
            "the per-shard writer stands in for a sharded application that follows the DSN file"),
    Allowed("dbmigrate/rehearsal/faultmatrix/workload.py", None,
            "the fault matrix's long statement stands in for an application holding locks at the fence"),
    Allowed("dbmigrate/rehearsal/readload.py", None,
            "the rehearsal's read workload stands in for the application's own queries"),
    Allowed("dbmigrate/rehearsal/rehearse_swap.py", None,
            "the schema-swap rehearsal's DDL is playbook text for the procedure, and its check reads each "
            "server's table definition as an operator would"),
    Allowed("dbmigrate/digest/model.py", "SHOW CREATE TABLE",
            "strips the prefix pt-query-digest puts before table names in its JSON; nothing is executed"),
]


@functools.cache
def tree() -> dict[str, rules.Module]:
    return rules.load_tree(ROOT)


def fake(**sources: str) -> dict[str, rules.Module]:
    """Modules from source text, keyed by dotted name (a package's __init__ by its name + '.__init__')."""
    out = {}
    for dotted, source in sources.items():
        is_init = dotted.endswith(".__init__")
        name = dotted.removesuffix(".__init__")
        path = name.replace(".", "/") + ("/__init__.py" if is_init else ".py")
        out[name] = rules.parse(name, path, source)
    return out


# -- the tree ---------------------------------------------------------------------------

def test_layers_hold():
    assert rules.layer_violations(tree()) == []


def test_no_sql_outside_db():
    assert rules.sql_violations(tree(), ALLOWED_SQL) == []


def test_every_allowlist_entry_is_still_needed_and_says_why():
    modules = tree()
    for entry in ALLOWED_SQL:
        assert entry.reason, entry
        others = [a for a in ALLOWED_SQL if a is not entry]
        assert rules.sql_violations(modules, others), f"{entry.path} no longer needs its allowlist entry"


def test_no_import_cycles_counting_imports_inside_functions():
    assert rules.cycles(rules.import_graph(tree(), top_level_only=False)) == []


def test_no_module_uses_another_modules_private_names():
    assert rules.private_violations(tree()) == []


# -- each rule can fail -------------------------------------------------------------------

def test_engine_importing_db_is_caught():
    modules = fake(**{"dbmigrate.engine.runner": "from dbmigrate.db.inspector import Inspector\n"})
    assert any("engine/runner.py:1 imports dbmigrate.db.inspector" in v for v in rules.layer_violations(modules))


def test_procedures_importing_cli_tui_or_rehearsal_is_caught():
    modules = fake(**{"dbmigrate.procedures.promote.procedure": (
        "def f():\n    from dbmigrate.rehearsal.sandbox import manager\n"
        "from dbmigrate.cli import render\nimport dbmigrate.tui.app\n")})
    found = " ".join(rules.layer_violations(modules))
    assert "dbmigrate.rehearsal.sandbox" in found and "dbmigrate.cli" in found and "dbmigrate.tui.app" in found


def test_tui_importing_db_or_cli_is_caught():
    modules = fake(**{"dbmigrate.tui.panels": "from dbmigrate.cli.lag import sparkline\nfrom ..db import flavor\n"})
    found = " ".join(rules.layer_violations(modules))
    assert "dbmigrate.cli.lag" in found and "dbmigrate.db" in found


def test_sql_literal_outside_db_is_caught_and_prose_is_not():
    modules = fake(**{
        "dbmigrate.lag": 'Q = "SELECT @@GLOBAL.gtid_binlog_pos AS pos"\nK = f"KILL CONNECTION {1}"\n',
        "dbmigrate.db.inspector": 'Q = "SELECT 1 AS one"\n',
        "dbmigrate.cli.render": 'M = "set global read_only by hand on the old primary"\n'
                                'D = "KILL CONNECTION <id> for each remaining application session"\n',
    })
    found = rules.sql_violations(modules, [])
    assert [v.split(" has")[0] for v in found] == ["dbmigrate/lag.py:1", "dbmigrate/lag.py:2"]
    assert rules.sql_violations(modules, [Allowed("dbmigrate/lag.py", None, "test")]) == []


def test_import_cycle_is_caught_even_through_a_function_level_import():
    modules = fake(**{
        "dbmigrate.a": "from dbmigrate.b import x\n",
        "dbmigrate.b": "def x():\n    from dbmigrate.a import y\n",
        "dbmigrate.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dbmigrate.a import y\n",
    })
    graph = rules.import_graph(modules, top_level_only=False)
    assert rules.cycles(graph) == [["dbmigrate.a", "dbmigrate.b"]]
    assert rules.cycles(rules.import_graph(modules, top_level_only=True)) == []


def test_private_name_of_another_module_is_caught_both_ways():
    modules = fake(**{
        "dbmigrate.procedures.promote": "def _sw(): ...\n",
        "dbmigrate.procedures.extras": "from dbmigrate.procedures.promote import _sw\n",
        "dbmigrate.procedures.other": "from dbmigrate.procedures import promote\nx = promote._sw\n",
        "dbmigrate.procedures.__init__": "",
        "dbmigrate.procedures.own": "def _mine(): ...\nx = _mine\n",
    })
    found = rules.private_violations(modules)
    assert len(found) == 2
    assert any("extras.py:1" in v for v in found) and any("other.py:2" in v for v in found)
