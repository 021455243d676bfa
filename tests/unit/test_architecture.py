"""The package keeps its shape: layers, no SQL outside db/, no cycles, no borrowed private names.

Every rule runs on the real tree, and on a synthetic violation that proves it can fail.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tests.unit import archrules as rules
from tests.unit.archrules import Allowed, Reached

ROOT = Path(__file__).resolve().parents[2]

ALLOWED_SQL = [
    Allowed("dbmigrate/engine/journal.py", None,
            "the run journal is a local SQLite file, not a MySQL/MariaDB server"),
    Allowed("dbmigrate/rehearsal/verify/writer.py", None,
            "the zero-loss verifier stands in for the application: it writes through the router as an app does"),
    Allowed("dbmigrate/rehearsal/verify/shard_writer.py", None,
            "the per-shard writer stands in for a sharded application that follows the DSN file"),
    Allowed("dbmigrate/rehearsal/verify/pooled_writer.py", None,
            "the pooled writer stands in for an application with a connection pool and its own session settings"),
    Allowed("dbmigrate/rehearsal/faultmatrix/workload.py", None,
            "the fault matrix's long statement stands in for an application holding locks at the fence"),
    Allowed("dbmigrate/rehearsal/clients/pools.py", None,
            "the application pools' own workload (their table, prepared INSERT and lookup), not dbmigrate's"),
    Allowed("dbmigrate/rehearsal/readload.py", None,
            "the rehearsal's read workload stands in for the application's own queries"),
    Allowed("dbmigrate/rehearsal/rehearse_swap.py", None,
            "the schema-swap rehearsal's DDL is playbook text for the procedure, and its check reads each "
            "server's table definition as an operator would"),
    Allowed("dbmigrate/digest/model.py", "SHOW CREATE TABLE",
            "strips the prefix pt-query-digest puts before table names in its JSON; nothing is executed"),
]

ALLOWED_PROCESSES: list[Allowed] = []  # logical seeding runs mariadb-dump and mariadb through tools/dump.py

ALLOWED_REACHES = [
    Reached("dbmigrate/db/connection.py", "_read_timeout",
            "the connector's public timeout setters take whole seconds; a statement's bound needs fractions"),
    Reached("dbmigrate/db/connection.py", "_write_timeout",
            "the connector's public timeout setters take whole seconds; a statement's bound needs fractions"),
    Reached("dbmigrate/rehearsal/clients/pools.py", "_socket",
            "a Go-like pool checks a kept connection as go-sql-driver does, a peek on its socket that sends "
            "nothing; the connector has no public accessor for it"),
]

# Module-level state left in procedures/: each kept on purpose, and why.
ALLOWED_STATE = [
    rules.StateAllowed("dbmigrate/procedures/registry.py", "_REGISTRY",
                       "procedures register themselves when imported (@register); it is only read afterwards"),
    rules.StateAllowed("dbmigrate/procedures/consolidate/provision.py", "_PROVISIONERS",
                       "instance provisioners register by kind when imported, as procedures do"),
    rules.StateAllowed("dbmigrate/procedures/consolidate/windows.py", "WINDOWS",
                       "one per process on purpose: every fleet in the process shares the same cores"),
    rules.StateAllowed("dbmigrate/procedures/consolidate/context.py", "_STATE_LOCK",
                       "the run state is one journal row that fleet threads of the process edit in turn"),
    rules.StateAllowed("dbmigrate/procedures/kit/fence_watch.py", "_not_waited_for",
                       "a watchdog that outlives its fence is joined by the next fence of the process"),
    rules.StateAllowed("dbmigrate/procedures/kit/guard.py", "_WIRE",
                       "a guard's wire window is a running tcpdump-to-tshark stream held across steps of one run; "
                       "a run resumed by another process reopens it, and the host's tcpdump ends on its own"),
]

# Module-level state left in db/: the process's safety ledger, and what is the process's by nature.
ALLOWED_DB_STATE = [
    rules.StateAllowed("dbmigrate/db/ledger.py", "_PROCESS_LEDGER",
                       "fencing generations, intents and statements in doubt hold for every connection of the "
                       "process; each handle is given the ledger (this one by default), tests give fresh ones"),
    rules.StateAllowed("dbmigrate/db/connection.py", "_listeners",
                       "the fault matrix's pause hears every statement any handle of the process sends"),
    rules.StateAllowed("dbmigrate/db/connection.py", "log",
                       "the statements' logger: logging's own registry, configured by the front end"),
    rules.StateAllowed("dbmigrate/db/generation.py", "log",
                       "the statements' logger: logging's own registry, configured by the front end"),
    rules.StateAllowed("dbmigrate/db/credentials.py", "_env_secrets",
                       "a password_env value is taken out of the process's environment once, for every child"),
    rules.StateAllowed("dbmigrate/db/credentials.py", "_live_files",
                       "private defaults files of the process, removed by the signal that ends it"),
    rules.StateAllowed("dbmigrate/db/credentials.py", "_live_lock",
                       "guards the two above: the process's environment and its private files"),
    rules.StateAllowed("dbmigrate/db/flavor.py", "MARIADB",
                       "a flavour holds no state: it spells SQL"),
    rules.StateAllowed("dbmigrate/db/flavor.py", "MYSQL",
                       "a flavour holds no state: it spells SQL"),
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


def test_front_ends_call_app_only():
    assert rules.front_end_violations(tree()) == []


def test_nothing_but_the_rehearsal_commands_imports_the_rehearsal():
    assert rules.rehearsal_violations(tree()) == []


def test_no_cycles_between_packages():
    assert rules.cycles(rules.package_graph(tree())) == []


def test_programs_are_started_in_hosts_and_tools_only():
    assert rules.process_violations(tree(), ALLOWED_PROCESSES) == []


def test_no_private_attribute_is_reached_through_an_object():
    assert rules.private_attribute_violations(tree(), ALLOWED_REACHES) == []


def test_procedures_hold_no_module_level_state_but_the_named_allowances():
    assert rules.module_state(tree(), "dbmigrate.procedures", ALLOWED_STATE) == []
    for entry in ALLOWED_STATE:
        assert entry.reason
        others = [a for a in ALLOWED_STATE if a is not entry]
        assert rules.module_state(tree(), "dbmigrate.procedures", others), f"{entry.path} no longer holds {entry.name}"


def test_module_level_state_in_procedures_is_caught():
    modules = fake(**{"dbmigrate.procedures.kit.cache": (
        "import threading\nimport re\nSEEN = {}\nLOCK = threading.Lock()\nPENDING: list[str] = []\n"
        "UNITS = {'disk': 'GB'}\nNAMES = frozenset({'a'})\n_RE = re.compile('x')\n__all__ = []\n")})
    found = rules.module_state(modules, "dbmigrate.procedures", [])
    assert [v.split(" ")[1] for v in found] == ["SEEN", "LOCK", "PENDING"], found


def test_db_holds_no_module_level_state_but_the_process_ledger_and_the_named_allowances():
    assert rules.module_state(tree(), "dbmigrate.db", ALLOWED_DB_STATE) == []
    for entry in ALLOWED_DB_STATE:
        assert entry.reason
        others = [a for a in ALLOWED_DB_STATE if a is not entry]
        assert rules.module_state(tree(), "dbmigrate.db", others), f"{entry.path} no longer holds {entry.name}"


def test_safety_state_outside_the_ledger_in_db_is_caught():
    """A second registry of doubts, or generations kept beside the process ledger, is caught."""
    modules = fake(**{
        "dbmigrate.db.generation": "GENERATIONS = Generations()\nBUMP_BOUND_S = float(12)\n",
        "dbmigrate.db.in_doubt": "_by_address: dict[str, list[str]] = {}\n",
        "dbmigrate.db.ledger": "_PROCESS_LEDGER = SafetyLedger()\n_SPARE = SafetyLedger()\n",
    })
    found = rules.module_state(modules, "dbmigrate.db", ALLOWED_DB_STATE)
    assert [v.split(" ")[1] for v in found] == ["GENERATIONS", "_by_address", "_SPARE"], found


# Imports that cross a documented layer upward, each on purpose (docs/architecture.md says why).
ALLOWED_UPWARD = [
    Reached("dbmigrate/db/lease.py", "dbmigrate.engine.lease",
            "db/ reads and writes the cluster lease row; the engine's lease module holds its rules"),
]


def layers() -> list[tuple[str, list[str]]]:
    return rules.documented_layers((ROOT / "docs" / "architecture.md").read_text())


def test_the_layers_docs_architecture_draws_hold_in_the_import_graph():
    assert [name for name, _ in layers()][:3] == ["front ends", "rehearsal", "use cases"]
    assert rules.layer_order_violations(tree(), layers(), ALLOWED_UPWARD) == []
    for entry in ALLOWED_UPWARD:
        assert entry.reason
        assert rules.layer_order_violations(tree(), layers(), []), f"{entry.path} no longer imports {entry.attribute}"


def test_an_import_of_a_layer_above_or_a_module_in_no_layer_is_caught():
    modules = fake(**{
        "dbmigrate.engine.runner": "from dbmigrate.procedures.kit import fence\nfrom dbmigrate.clock import Clock\n",
        "dbmigrate.db.inspector": "import dbmigrate.app.runs\nfrom dbmigrate import __version__\n",
        "dbmigrate.newthing": "",
    })
    found = rules.layer_order_violations(modules, layers(), [])
    assert sorted({v.split(" ")[0] for v in found}) == ["dbmigrate/db/inspector.py:1", "dbmigrate/engine/runner.py:1",
                                                         "dbmigrate/newthing.py:"], found


def test_use_cases_importing_a_front_end_are_caught():
    modules = fake(**{"dbmigrate.app.runs": ("from dbmigrate.cli.render import table\n"
                                             "def f():\n    import dbmigrate.tui.session\n"),
                      "dbmigrate.app.lag": "from dbmigrate.lag import sample_lag\n"})
    found = rules.layer_violations(modules)
    assert sorted({v.split(" imports")[0] for v in found if "dbmigrate.cli" in v or "dbmigrate.tui" in v}) \
        == ["dbmigrate/app/runs.py:1", "dbmigrate/app/runs.py:3"], found
    assert not any(v.startswith("dbmigrate/app/lag.py") for v in found)


def fence_fields() -> set[str]:
    from dbmigrate.procedures.kit.fence import FenceParams

    return set(FenceParams.model_fields)


def test_every_procedure_fences_through_the_kit_fence_and_declares_no_fence_setting_again():
    assert rules.fence_violations(tree(), fence_fields()) == []


def test_a_fence_sent_outside_the_kit_fence_or_a_fence_setting_declared_again_is_caught():
    modules = fake(**{
        "dbmigrate.procedures.consolidate.cutover": "def f(a):\n    return a.fence_and_read_binlog_pos(5, None)\n",
        "dbmigrate.procedures.promote.procedure": "class PromoteParams:\n    fence_timeout_s: float = 5\n    other_s: float = 1\n",
        "dbmigrate.procedures.kit.fence": "class FenceParams:\n    fence_timeout_s: float = 5\n"
                                          "def g(a):\n    return a.fence_and_read_binlog_pos(5, None)\n",
    })
    found = rules.fence_violations(modules, fence_fields())
    assert [v.split(":")[0] for v in found] == ["dbmigrate/procedures/consolidate/cutover.py",
                                                "dbmigrate/procedures/promote/procedure.py"], found
    assert "fence_timeout_s" in found[1] and "other_s" not in found[1]


# Where a fencing statement (read_only on, the global read lock, the fence's expiry) may be sent
# or spelled outside the kit's fence, and why. kit/fence.py holds the one fence.
ALLOWED_FENCING = [
    rules.FenceAllowed("dbmigrate/procedures/kit/fence.py", ("read_only", "expiry"),
                       "the one fence: calm wait, bound, watchdog, expiry and generation; and `hold_read_only` for "
                       "a server that takes no application writes"),
    rules.FenceAllowed("dbmigrate/db/flavor.py", ("read_only", "read_lock", "expiry"),
                       "the flavours' SQL: each statement's text, sent only through db/applier.py; the global read "
                       "lock is a lock's name there, as the server reports it to whoever reads its holders"),
    rules.FenceAllowed("dbmigrate/db/applier.py", ("read_only", "expiry"),
                       "one method per statement: the kit's fence sends read_only and its expiry through them"),
    rules.FenceAllowed("dbmigrate/db/readers/sessions.py", ("read_lock",),
                       "reads who holds what a fence waits behind, and names the global read lock in its message"),
    rules.FenceAllowed("dbmigrate/procedures/kit/switchover/fence.py", ("read_lock",),
                       "a fence that gave up names the global read lock that blocked it, in its error"),
    rules.FenceAllowed("dbmigrate/topology/wire.py", ("read_only",),
                       "`dbmigrate topology wire` makes a replica read-only before it replicates: a setup command "
                       "outside any run, in the layer below the procedures (it cannot reach the kit)"),
]


def test_every_fencing_statement_is_in_the_kit_fence():
    assert rules.fencing_violations(tree(), ALLOWED_FENCING) == []


def test_every_fencing_allowance_is_still_needed_for_each_of_its_kinds_and_says_why():
    modules = tree()
    for entry in ALLOWED_FENCING:
        assert entry.reason and entry.kinds and set(entry.kinds) <= set(rules.FENCING_KINDS), entry
        for kind in entry.kinds:
            narrower = [a for a in ALLOWED_FENCING if a is not entry] + [
                rules.FenceAllowed(entry.path, tuple(k for k in entry.kinds if k != kind), "test")]
            assert rules.fencing_violations(modules, narrower), f"{entry.path} no longer needs {kind}"


def test_a_fencing_statement_outside_the_kit_fence_is_caught_and_an_unfence_or_prose_is_not():
    modules = fake(**{
        "dbmigrate.procedures.consolidate.cutover": (
            "def undo(a, ctx, here):\n"
            "    a.set_read_only(True)\n"  # 2
            "    a.set_read_only(not here)\n"  # 3: may turn it on
            "    a.set_read_only(on=True, lock_wait_timeout=5)\n"  # 4
            "    a.set_read_only(False)\n"  # an unfence: not a fence
            "    a.sql('SET GLOBAL read_only=1')\n"  # 6
            "    a.sql(f'SET @@global.super_read_only = {1}')\n"  # 7
            "    a.sql('FLUSH TABLES WITH READ LOCK')\n"  # 8
            "    a.sql('CREATE EVENT e ON SCHEDULE AT NOW() DO SET @@GLOBAL.read_only=0')\n"  # 9
            "    a.fence_and_read_binlog_pos(5, 10)\n"  # 10
            "    q = a.flavor.fence_expiry_sql(10)\n"  # 11
            "    hint = 'set read_only=ON by hand on the one that must not take writes'\n"
            "    shape = 'SHOW CREATE EVENT e'\n"),
        "dbmigrate.procedures.kit.fence": "def f(a):\n    a.set_read_only(True)\n    a.fence_and_read_binlog_pos(5)\n",
    })
    found = rules.fencing_violations(modules, ALLOWED_FENCING)
    where = [(int(v.split(":")[1].split(" ")[0]), v.split("(")[-1].split(")")[0]) for v in found]
    assert sorted(where) == [(2, "read_only"), (3, "read_only"), (4, "read_only"), (6, "read_only"),
                             (7, "read_only"), (8, "read_lock"), (9, "expiry"), (10, "expiry"),
                             (10, "read_only"), (11, "expiry")], found
    assert all(v.startswith("dbmigrate/procedures/consolidate/cutover.py") for v in found), found
    allowed = ALLOWED_FENCING + [rules.FenceAllowed("dbmigrate/procedures/consolidate/cutover.py", ("read_only",),
                                                    "test")]
    assert {v.split("(")[-1].split(")")[0] for v in rules.fencing_violations(modules, allowed)} == {"read_lock",
                                                                                                    "expiry"}


def test_every_process_and_reach_allowance_is_still_needed_and_says_why():
    modules = tree()
    for entry in ALLOWED_PROCESSES:
        assert entry.reason
        others = [a for a in ALLOWED_PROCESSES if a is not entry]
        assert rules.process_violations(modules, others), f"{entry.path} no longer starts programs itself"
    for reach in ALLOWED_REACHES:
        assert reach.reason
        others = [a for a in ALLOWED_REACHES if a is not reach]
        assert rules.private_attribute_violations(modules, others), f"{reach.path} no longer reaches {reach.attribute}"


# -- each rule can fail -------------------------------------------------------------------

def test_engine_importing_db_is_caught():
    modules = fake(**{"dbmigrate.engine.runner": "from dbmigrate.db.inspector import Inspector\n"})
    assert any("engine/runner.py:1 imports dbmigrate.db.inspector" in v for v in rules.layer_violations(modules))


def test_procedures_importing_cli_tui_or_app_is_caught():
    modules = fake(**{"dbmigrate.procedures.promote.procedure": (
        "def f():\n    from dbmigrate.app import runs\n"
        "from dbmigrate.cli import render\nimport dbmigrate.tui.session\n")})
    found = " ".join(rules.layer_violations(modules))
    assert "dbmigrate.app.runs" in found and "dbmigrate.cli" in found and "dbmigrate.tui.session" in found


def test_front_end_importing_anything_but_app_is_caught():
    modules = fake(**{
        "dbmigrate.tui.panels": "from dbmigrate.cli.lag import sparkline\nfrom ..db import flavor\n",
        "dbmigrate.cli.warm": ("from dbmigrate.cli.common import console\nfrom dbmigrate.app import warm\n"
                               "from dbmigrate.exceptions import UsageError\nfrom dbmigrate.console_table import Col\n"
                               "from dbmigrate.engine.events import Event\n"
                               "def f():\n    from dbmigrate.warm import methods\n"
                               "    from dbmigrate.engine.runner import RunOutcome\n"),
        "dbmigrate.cli.checksum": "from dbmigrate.rehearsal.sandbox import manager\n",
        "dbmigrate.cli.sandbox": "from dbmigrate.rehearsal.sandbox import manager\n",
    })
    found = rules.front_end_violations(modules)
    text = " ".join(found)
    assert "tui/panels.py:1 imports dbmigrate.cli.lag" in text and "tui/panels.py:2 imports dbmigrate.db" in text
    assert "cli/warm.py:7 imports dbmigrate.warm" in text and "cli/warm.py:8 imports dbmigrate.engine.runner" in text
    assert "cli/checksum.py:1 imports dbmigrate.rehearsal" in text
    assert not any(v.startswith(("dbmigrate/cli/sandbox.py", "dbmigrate/cli/warm.py:1", "dbmigrate/cli/warm.py:2",
                                 "dbmigrate/cli/warm.py:3", "dbmigrate/cli/warm.py:4", "dbmigrate/cli/warm.py:5"))
                   for v in found)


def test_product_importing_the_rehearsal_is_caught():
    modules = fake(**{
        "dbmigrate.app.runs": "def f():\n    from dbmigrate.rehearsal.provision import install\n",
        "dbmigrate.procedures.promote.procedure": "import dbmigrate.rehearsal.sandbox.manager\n",
        "dbmigrate.cli.rehearse": "from dbmigrate.rehearsal.rehearse import rehearse_promote\n",
        "dbmigrate.rehearsal.consolidate": "from dbmigrate.rehearsal.sandbox import manager\n",
    })
    found = rules.rehearsal_violations(modules)
    assert sorted({v.split(" imports")[0] for v in found}) == ["dbmigrate/app/runs.py:2",
                                                       "dbmigrate/procedures/promote/procedure.py:1"]


def test_cycle_between_packages_is_caught():
    modules = fake(**{
        "dbmigrate.procedures.kit.switchover": "def f():\n    from dbmigrate.procedures.promote.extras import x\n",
        "dbmigrate.procedures.promote.extras": "from dbmigrate.procedures.kit.cutover import y\n",
        "dbmigrate.procedures.kit.cutover": "",
        "dbmigrate.tui.widgets.gate": "from dbmigrate.tui.board import GateRow\n",
        "dbmigrate.tui.board": "",
        "dbmigrate.tui.session": "from dbmigrate.tui.widgets.gate import GateModal\n",
    })
    # no module imports itself around, but the kit and promote depend on each other
    assert rules.cycles(rules.import_graph(modules, top_level_only=False)) == []
    assert rules.cycles(rules.package_graph(modules)) == [["dbmigrate.procedures.kit", "dbmigrate.procedures.promote"]]


def test_program_started_outside_hosts_and_tools_is_caught():
    modules = fake(**{
        "dbmigrate.procedures.consolidate.seed": "import subprocess\n",
        "dbmigrate.engine.hooks": "import os\ndef f():\n    os.system('x')\n    from asyncio import create_subprocess_exec\n",
        "dbmigrate.hosts.base": "import subprocess\n",
        "dbmigrate.tools.percona": "import subprocess\n",
    })
    found = rules.process_violations(modules, [])
    assert [v.split(" ")[0] for v in found] == ["dbmigrate/engine/hooks.py:3", "dbmigrate/engine/hooks.py:4",
                                                "dbmigrate/procedures/consolidate/seed.py:1"]
    allowed = [Allowed("dbmigrate/procedures/consolidate/seed.py", None, "test")]
    assert len(rules.process_violations(modules, allowed)) == 2


def test_private_attribute_reached_through_an_object_is_caught():
    modules = fake(**{
        "dbmigrate.hosts.base": "class Host:\n    def _popen(self): ...\n    def run(self, other):\n"
                                "        self._popen()\n        other._popen()\n",
        "dbmigrate.hosts.pipe": "def stream(src):\n    return src._popen()\n",
        "dbmigrate.db.connection": "def f(cursor):\n    cursor._read_timeout = 1\n    super()._x()\n",
    })
    found = rules.private_attribute_violations(modules, [])
    assert [v.split(" reaches")[0] for v in found] == ["dbmigrate/db/connection.py:2", "dbmigrate/hosts/pipe.py:2"]
    allowed = [Reached("dbmigrate/db/connection.py", "_read_timeout", "test")]
    assert [v.split(" reaches")[0] for v in rules.private_attribute_violations(modules, allowed)] == [
        "dbmigrate/hosts/pipe.py:2"]


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
