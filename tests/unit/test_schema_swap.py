"""schema-swap without servers: which DDL is accepted or refused (and why), what it must
leave behind, ROW compatibility, the SQL that keeps DDL out of the binlog, and the plan."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dbmigrate.app.runs import plan_playbook
from dbmigrate.db.flavor import MARIADB, MYSQL
from dbmigrate.exceptions import ConfigError
from dbmigrate.procedures.schema_swap import ddl as schema_ddl
from dbmigrate.procedures.schema_swap.ddl import ColumnType, DdlRefused, Expectation, IndexDef, IndexPart, classify
from dbmigrate.procedures.schema_swap.expect import conflicts, ddl_applied, expectation_holds

ROOT = Path(__file__).resolve().parents[2]


# -- accepted ---------------------------------------------------------------------------

def test_add_column_and_index_in_one_alter():
    d = classify("ALTER TABLE app.orders ADD COLUMN note2 VARCHAR(32) NULL, ADD INDEX idx_amount (amount), "
                 "ALGORITHM=INPLACE, LOCK=NONE;")
    assert (d.table, d.kind) == ("app.orders", "alter-table")
    assert d.expectations == (Expectation("app.orders", column="note2", column_type=ColumnType("varchar", "32")),
                              Expectation("app.orders", index="idx_amount", index_def=IndexDef((IndexPart("amount"),))))
    assert d.added_columns == ("note2",)


def test_quoted_names_and_strings_are_not_keywords():
    d = classify("alter table `app`.`my orders` add `after` int default 0 comment 'FIRST, AFTER x; DROP', "
                 "add key (`a`(10), b desc)")
    assert d.table == "app.my orders"
    assert d.expectations == (Expectation("app.my orders", column="after", column_type=ColumnType("int")),
                              Expectation("app.my orders", index_columns=("a", "b"),
                                          index_def=IndexDef((IndexPart("a", 10), IndexPart("b", desc=True)))))


@pytest.mark.parametrize("sql, kind, expectation", [
    ("CREATE INDEX ix_b ON app.t (b)", "create-index",
     Expectation("app.t", index="ix_b", index_def=IndexDef((IndexPart("b"),)))),
    ("CREATE FULLTEXT INDEX ft ON app.t (body)", "create-index",
     Expectation("app.t", index="ft", index_def=IndexDef((IndexPart("body"),), kind="FULLTEXT"))),
    ("CREATE INDEX ix_h ON app.t (b) USING HASH", "create-index",
     Expectation("app.t", index="ix_h", index_def=IndexDef((IndexPart("b"),), kind="HASH"))),
    ("DROP INDEX ix_b ON app.t", "drop-index", Expectation("app.t", index="ix_b", absent=True)),
    ("ALTER TABLE app.t DROP INDEX ix_b", "alter-table", Expectation("app.t", index="ix_b", absent=True)),
    ("CREATE TABLE IF NOT EXISTS app.n (id INT PRIMARY KEY)", "create-table", Expectation("app.n")),
    ("ALTER TABLE app.t ADD c INT NOT NULL", "alter-table", Expectation("app.t", column="c",
                                                                        column_type=ColumnType("int"))),
    ("ALTER TABLE app.t ADD COLUMN d DECIMAL(10, 2) UNSIGNED", "alter-table",
     Expectation("app.t", column="d", column_type=ColumnType("decimal", "10,2", unsigned=True))),
    ("ALTER TABLE app.t ADD COLUMN e ENUM('x', 'y')", "alter-table",
     Expectation("app.t", column="e", column_type=ColumnType("enum", "'x','y'"))),
])
def test_accepted_kinds(sql, kind, expectation):
    d = classify(sql)
    assert d.kind == kind and d.expectations == (expectation,)


# -- refused ------------------------------------------------------------------------------

@pytest.mark.parametrize("sql, why", [
    ("ALTER TABLE app.t DROP COLUMN b", "DROP COLUMN b shifts the columns"),
    ("ALTER TABLE app.t ADD COLUMN c INT, DROP b", "DROP COLUMN b shifts"),
    ("ALTER TABLE app.t ADD COLUMN c INT AFTER a", "AFTER places the column in the middle"),
    ("ALTER TABLE app.t ADD COLUMN c INT FIRST", "FIRST places the column first"),
    ("ALTER TABLE app.t MODIFY a BIGINT", "MODIFY changes a column's type"),
    ("ALTER TABLE app.t CHANGE a a2 INT", "CHANGE renames or retypes"),
    ("ALTER TABLE app.t RENAME COLUMN a TO a2", "RENAME renames"),
    ("ALTER TABLE app.t CONVERT TO CHARACTER SET utf8mb4", "CONVERT changes the character set"),
    ("ALTER TABLE app.t ADD UNIQUE INDEX u (a)", "UNIQUE index"),
    ("CREATE UNIQUE INDEX u ON app.t (a)", "UNIQUE index"),
    ("ALTER TABLE app.t ADD COLUMN c INT UNIQUE", "UNIQUE index"),
    ("ALTER TABLE app.t DROP PRIMARY KEY", "PRIMARY KEY"),
    ("ALTER TABLE app.t ADD PRIMARY KEY (id)", "PRIMARY KEY"),
    ("ALTER TABLE app.t ADD COLUMN n INT AUTO_INCREMENT", "AUTO_INCREMENT"),
    ("ALTER TABLE app.t ADD FOREIGN KEY (a) REFERENCES app.u (id)", "ADD FOREIGN"),
    ("UPDATE app.t SET a = 1", "not DDL (UPDATE"),
    ("INSERT INTO app.t VALUES (1)", "not DDL (INSERT"),
    ("delete from app.t", "not DDL (DELETE"),
    ("CREATE TABLE app.c SELECT * FROM app.t", "CREATE TABLE ... SELECT"),
    ("DROP TABLE app.t", "DROP TABLE"),
    ("TRUNCATE TABLE app.t", "TRUNCATE"),
    ("ALTER TABLE t ADD COLUMN c INT", "not schema-qualified"),
    ("CREATE INDEX ix ON t (a)", "not schema-qualified"),
    ("ALTER TABLE app.t ADD COLUMN c INT; DROP TABLE app.t", "more than one statement"),
    ("/*!50000 ALTER TABLE app.t ADD c INT */", "executable comment"),
    ("ALTER TABLE app.t ALGORITHM=INPLACE", "options only"),
    ("CREATE VIEW app.v AS SELECT 1", "CREATE VIEW is not supported"),
    ("ALTER TABLE app.t ADD COLUMN `c", "unterminated"),
])
def test_refused_with_the_reason(sql, why):
    with pytest.raises(DdlRefused) as e:
        classify(sql)
    assert why in e.value.message, e.value.message
    assert e.value.exit_code == 2


def test_undo_may_drop_what_was_added_but_must_be_qualified_ddl():
    assert schema_ddl.check_undo("ALTER TABLE app.t DROP INDEX ix, DROP COLUMN c;") == "app.t"
    with pytest.raises(DdlRefused, match="undo must be DDL"):
        schema_ddl.check_undo("DELETE FROM app.t")
    with pytest.raises(DdlRefused, match="schema-qualified"):
        schema_ddl.check_undo("ALTER TABLE t DROP COLUMN c")


# -- ROW compatibility -----------------------------------------------------------------------

SOURCE = [("id", "int(11)"), ("a", "int(11)"), ("b", "varchar(10)")]


def test_extra_trailing_columns_are_row_compatible():
    ok, why = schema_ddl.row_compatible(SOURCE, SOURCE + [("c", "int(11)")])
    assert ok and "extra trailing: c" in why
    assert schema_ddl.row_compatible(SOURCE, SOURCE)[0]


@pytest.mark.parametrize("target, why", [
    ([("id", "int(11)"), ("b", "varchar(10)"), ("a", "int(11)")], "position 2 is b"),
    ([("id", "int(11)"), ("a", "bigint(20)"), ("b", "varchar(10)")], "position 2 is a bigint(20)"),
    ([("id", "int(11)"), ("a", "int(11)")], "column b (varchar(10)) is missing"),
    ([], "table missing"),
])
def test_anything_else_is_not(target, why):
    ok, reason = schema_ddl.row_compatible(SOURCE, target)
    assert not ok and why in reason


# -- expectations read back ----------------------------------------------------------------------

class FakeInspector:
    def __init__(self, columns, indexes, exists=True):
        self.columns, self.indexes, self.exists = columns, indexes, exists

    def table_columns(self, schema, table):
        return self.columns

    def table_indexes(self, schema, table):
        return self.indexes

    def table_info(self, schema, table):
        return {"engine": "InnoDB"} if self.exists else None


def test_expectations_hold_or_not():
    insp = FakeInspector(SOURCE + [("Note2", "varchar(32)")],
                         [{"name": "PRIMARY", "columns": [("id", "int")]},
                          {"name": "idx_ab", "columns": [("a", "int"), ("b", "varchar")]}])
    assert expectation_holds(insp, Expectation("app.t", column="note2")) == (True, "app.t has column note2")
    assert expectation_holds(insp, Expectation("app.t", index="IDX_AB"))[0]
    assert expectation_holds(insp, Expectation("app.t", index_columns=("a", "b")))[0]
    assert not expectation_holds(insp, Expectation("app.t", index_columns=("b", "a")))[0]
    assert not expectation_holds(insp, Expectation("app.t", index="idx_ab", absent=True))[0]
    assert expectation_holds(insp, Expectation("app.t", index="gone", absent=True))[0]
    assert not expectation_holds(FakeInspector([], [], exists=False), Expectation("app.n"))[0]


def index(name, *parts, unique=False, kind="BTREE"):
    """A server's index as Inspector.table_indexes returns it; parts are (column, prefix, desc)."""
    return {"name": name, "columns": [(c, "int") for c, _p, _d in parts], "parts": list(parts), "unique": unique,
            "type": kind}


def already_done(existing_indexes, statement, columns=SOURCE):
    """(done?, conflicts) for `statement` on a server with these indexes and columns."""
    insp = FakeInspector(columns, existing_indexes)
    ddl = classify(statement)
    return ddl_applied(insp, ddl), conflicts(insp, ddl)


def test_an_index_of_the_same_name_on_other_columns_is_not_done_and_is_named():
    """`fx_c (k)` exists: `ADD INDEX fx_c (c)` is not "already done", and the step says why."""
    done, clash = already_done([index("fx_c", ("k", None, False))], "ALTER TABLE app.t ADD INDEX fx_c (c)")
    assert not done
    assert clash == ["app.t has index fx_c (c) (it is (k))"]


@pytest.mark.parametrize("existing, statement, differs", [
    # column order
    (index("ix", ("a", None, False), ("b", None, False)), "CREATE INDEX ix ON app.t (b, a)", "(it is (a, b))"),
    # prefix length
    (index("ix", ("b", 10, False)), "CREATE INDEX ix ON app.t (b(20))", "(it is (b(10)))"),
    (index("ix", ("b", 10, False)), "CREATE INDEX ix ON app.t (b)", "(it is (b(10)))"),
    # uniqueness
    (index("ix", ("a", None, False), unique=True), "ALTER TABLE app.t ADD INDEX ix (a)", "(it is UNIQUE (a))"),
    # index type
    (index("ix", ("b", None, False), kind="FULLTEXT"), "CREATE INDEX ix ON app.t (b)", "(it is FULLTEXT (b))"),
    (index("ix", ("b", None, False)), "CREATE FULLTEXT INDEX ix ON app.t (b)", "(it is (b))"),
    # direction
    (index("ix", ("a", None, False)), "CREATE INDEX ix ON app.t (a DESC)", "(it is (a))"),
])
def test_every_part_of_an_index_definition_counts(existing, statement, differs):
    done, clash = already_done([existing], statement)
    assert not done and len(clash) == 1 and clash[0].endswith(differs), clash


@pytest.mark.parametrize("existing, statement", [
    (index("fx_c", ("c", None, False)), "ALTER TABLE app.t ADD INDEX fx_c (c)"),
    (index("ix", ("a", None, False), ("b", 10, False)), "CREATE INDEX ix ON app.t (a, b(10))"),
    (index("IX", ("a", None, True)), "CREATE INDEX ix ON app.t (`A` DESC)"),
    (index("ft", ("b", None, False), kind="FULLTEXT"), "ALTER TABLE app.t ADD FULLTEXT KEY ft (b)"),
    (index("h", ("a", None, False)), "CREATE INDEX h ON app.t (a) USING HASH"),  # InnoDB keeps it as a BTREE
])
def test_the_same_definition_is_done(existing, statement):
    assert already_done([existing], statement) == (True, [])


def test_an_unnamed_index_needs_an_index_with_the_same_definition():
    stmt = "ALTER TABLE app.t ADD INDEX (a, b(10))"
    assert already_done([index("a", ("a", None, False), ("b", None, False))], stmt) == (False, [])
    assert already_done([index("a", ("a", None, False), ("b", None, False)),
                         index("a_2", ("a", None, False), ("b", 10, False))], stmt) == (True, [])


@pytest.mark.parametrize("column_type, statement, done", [
    ("varchar(32)", "ALTER TABLE app.t ADD COLUMN n VARCHAR(32) NULL", True),
    ("varchar(64)", "ALTER TABLE app.t ADD COLUMN n VARCHAR(32) NULL", False),
    ("int(11)", "ALTER TABLE app.t ADD COLUMN n INTEGER", True),  # display width is not compared
    ("int(10) unsigned", "ALTER TABLE app.t ADD COLUMN n INT", False),
    ("bigint(20)", "ALTER TABLE app.t ADD COLUMN n INT", False),
    ("tinyint(1)", "ALTER TABLE app.t ADD COLUMN n BOOL", True),
    ("decimal(10,2)", "ALTER TABLE app.t ADD COLUMN n NUMERIC(10,2)", True),
    ("decimal(12,2)", "ALTER TABLE app.t ADD COLUMN n DECIMAL(10,2)", False),
    ("enum('x','y')", "ALTER TABLE app.t ADD COLUMN n ENUM('x', 'y')", True),
    ("double", "ALTER TABLE app.t ADD COLUMN n DOUBLE PRECISION", True),
])
def test_a_column_of_the_same_name_must_have_the_same_type(column_type, statement, done):
    got, clash = already_done([], statement, columns=SOURCE + [("n", column_type)])
    assert got is done
    assert clash == ([] if done else [f"app.t has column n {classify(statement).expectations[0].column_type.describe()} "
                                     f"(it is {column_type})"])


# -- SQL per flavor ----------------------------------------------------------------------------------

def test_ddl_without_binlog_per_flavor():
    assert MARIADB.ddl_without_binlog_sql("ALTER TABLE app.t ADD c INT") == \
        ["SET STATEMENT sql_log_bin=0 FOR ALTER TABLE app.t ADD c INT"]
    assert MYSQL.ddl_without_binlog_sql("ALTER TABLE app.t ADD c INT") == \
        ["SET SESSION sql_log_bin=0", "ALTER TABLE app.t ADD c INT", "SET SESSION sql_log_bin=1"]


def test_own_gtids_per_flavor():
    assert MARIADB.own_gtids("0-1-30,0-2-25,1-2-4", "2") == ["0-2-25", "1-2-4"]
    assert MARIADB.own_gtids("0-1-30", "3") == []
    uuid_a, uuid_b = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert MYSQL.own_gtids(f"{uuid_a}:1-5,{uuid_b}:1-3", uuid_b.upper()) == [f"{uuid_b}:1-3"]


# -- playbooks ------------------------------------------------------------------------------------------

def _playbook(tmp_path, **params) -> Path:
    inv = ROOT / "playbooks" / "inventory.example.yaml"
    doc = {"procedure": "schema-swap", "inventory": str(inv), "cluster": "orders",
           "params": {"ddl": ["ALTER TABLE orders.orders ADD COLUMN n INT NULL"], **params}}
    path = tmp_path / "swap.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_refused_ddl_is_a_located_playbook_error(tmp_path):
    path = _playbook(tmp_path, ddl=["ALTER TABLE orders.orders ADD COLUMN n INT NULL",
                                    "ALTER TABLE orders.orders MODIFY note TEXT"])
    with pytest.raises(ConfigError) as e:
        plan_playbook(path)
    assert f"{path}:" in e.value.message and "params.ddl" in e.value.message
    assert "statement 2 refused" in e.value.message and "MODIFY" in e.value.message


def test_plan_lists_every_side_then_the_primary(tmp_path):
    procedure = plan_playbook(_playbook(tmp_path, candidate="db-orders-3"))
    names = [p.name for p in procedure.phases]
    assert names == ["preflight", "alter db-orders-2", "return db-orders-2", "alter db-orders-3", "return db-orders-3",
                     "alter db-orders-4", "return db-orders-4", "switchover", "alter db-orders-1 (old primary)",
                     "finish"]
    assert procedure.rollback_on_failure and procedure.needs_lock
    cutover = [s.name for s in procedure.phase("switchover").steps]
    assert cutover[0] == "fence db-orders-1" and "open db-orders-3 for writes" in cutover
    assert [s.name for s in procedure.phase("finish").steps] == [
        "switch back to db-orders-1", "verify writes flow to db-orders-1", "route reads"]
    assert [g.name for g in procedure.phase("return db-orders-2").gates] == ["db-orders-2 ready"]
    ddl_step = procedure.phase("alter db-orders-2").steps[2]
    assert ddl_step.name == "apply DDL on db-orders-2 (binlog off)" and ddl_step.undo is not None


def test_plan_variants(tmp_path):
    skip = plan_playbook(_playbook(tmp_path, primary="skip"))
    assert [p.name for p in skip.phases][-1] == "return db-orders-4"
    keep = plan_playbook(_playbook(tmp_path, switch_back=False, warm={"method": "scan", "tables": ["orders.orders"]}))
    assert [s.name for s in keep.phase("finish").steps] == ["route reads"]
    assert [g.name for g in keep.phase("finish").gates] == ["db-orders-1 ready", "warm-up"]
    assert "warm db-orders-2 (scan)" in [s.name for s in keep.phase("alter db-orders-2").steps]


@pytest.mark.parametrize("statement", ["DROP TABLE app.orders", "TRUNCATE TABLE app.orders",
                                       "RENAME TABLE app.orders TO app.orders_old",
                                       "CREATE UNIQUE INDEX u ON app.orders (note)"])
def test_undo_ddl_is_held_to_the_rules_of_the_ddl(statement):
    from pydantic import ValidationError

    from dbmigrate.procedures.schema_swap.params import SchemaSwapParams

    with pytest.raises(ValidationError) as refused:
        SchemaSwapParams(ddl=["ALTER TABLE app.orders ADD COLUMN note2 INT"], undo_ddl=[statement])
    assert "undo statement 1 refused" in str(refused.value)


def test_undo_ddl_may_still_drop_what_the_ddl_added():
    from dbmigrate.procedures.schema_swap.params import SchemaSwapParams

    SchemaSwapParams(ddl=["ALTER TABLE app.orders ADD INDEX i (note)"],
                     undo_ddl=["DROP INDEX i ON app.orders", "ALTER TABLE app.orders DROP COLUMN note2"])


def test_schema_swap_preflight_names_a_typo_in_verify_columns_and_warm_tables():
    from dbmigrate.procedures.schema_swap.params import SchemaSwapParams
    from dbmigrate.procedures.schema_swap.preflight import missing_names

    p = SchemaSwapParams(ddl=["ALTER TABLE app.orders ADD COLUMN note2 INT"],
                         verify=[{"table": "app.orders", "column": "note2"}, {"table": "app.orders", "column": "notte"},
                                 {"table": "app.orderz"}],
                         warm={"tables": ["app.orders", "app.custmers"]})
    columns = {"app.orders": ["id", "note"], "app.orderz": [], "app.custmers": []}
    assert missing_names(p, columns) == ["table app.orderz does not exist", "table app.custmers does not exist",
                                         "column app.orders.notte does not exist and the DDL does not add it"]


@pytest.mark.parametrize("statement, expected", [
    ("ALTER TABLE app.orders ADD COLUMN c INT", "ALTER TABLE `s`.`app__orders` ADD COLUMN c INT"),
    ("ALTER TABLE `app`.`orders` ADD INDEX i (a)", "ALTER TABLE `s`.`app__orders` ADD INDEX i (a)"),
    ("CREATE INDEX i ON app . orders (a)", "CREATE INDEX i ON `s`.`app__orders` (a)"),
    ("DROP INDEX i ON app.orders", "DROP INDEX i ON `s`.`app__orders`"),
    ("CREATE TABLE app.orders LIKE app.orders_tpl", "CREATE TABLE `s`.`app__orders` LIKE app.orders_tpl"),
    # a longer name that starts with the table's is not the table
    ("ALTER TABLE app.orders ADD COLUMN orders_app INT", "ALTER TABLE `s`.`app__orders` ADD COLUMN orders_app INT"),
])
def test_a_statement_is_retargeted_at_its_scratch_copy(statement, expected):
    assert schema_ddl.retarget(statement, "app.orders", "`s`.`app__orders`") == expected


def test_retargeting_a_statement_that_does_not_name_the_table_is_refused():
    with pytest.raises(schema_ddl.DdlRefused, match="cannot find app.orders"):
        schema_ddl.retarget("ALTER TABLE app.orders2 ADD COLUMN c INT", "app.orders", "`s`.`x`")


def test_scratch_copies_are_named_by_schema_and_table_within_64_characters():
    from dbmigrate.db.scratch import scratch_name

    assert scratch_name("app", "orders") == "app__orders"
    assert len(scratch_name("a" * 40, "b" * 40)) == 64


def test_the_verify_sentence_counts_what_it_lists_each_once():
    from dbmigrate.procedures.schema_swap.sides import passed_sentence

    said = passed_sentence("db-2", ["app.t has column c", "app.t has index i", "app.t has column c",
                                    "app.t accepts ROW events from db-1"])
    assert said == ("db-2: 3 check(s) passed (app.t has column c; app.t has index i; "
                    "app.t accepts ROW events from db-1)")


def test_rename_index_is_accepted_and_leaves_the_old_name_absent():
    from dbmigrate.procedures.schema_swap import ddl as schema_ddl

    d = schema_ddl.classify("ALTER TABLE app.t RENAME INDEX ix_a TO ix_b")
    assert [(e.index, e.absent) for e in d.expectations] == [("ix_a", True), ("ix_b", False)]
    # A column or the table is still refused, with a reason about what it renames.
    with pytest.raises(schema_ddl.DdlRefused, match="renames a column or the table"):
        schema_ddl.classify("ALTER TABLE app.t RENAME COLUMN a TO b")


def test_the_verify_list_and_the_ddls_own_checks_say_one_check_once():
    from pathlib import Path

    from dbmigrate.playbook import load_playbook
    from dbmigrate.procedures.schema_swap.sides import without_covered

    p = load_playbook(Path(__file__).resolve().parents[2] / "playbooks" / "schema-ab-swap.yaml").params
    checks = without_covered([*(e for d in p.statements() for e in d.expectations),
                              *(v.expectation() for v in p.verify)])
    said = [c.describe() for c in checks]
    assert said.count("orders.orders has column gift_note varchar(255)") == 1
    assert "orders.orders has column gift_note" not in said  # the verify list's same, vaguer check
    assert len(said) == 3, said
