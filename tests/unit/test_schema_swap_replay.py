"""The schema swap's replay of the application's queries: hints read from the digest's samples."""

from __future__ import annotations

from dbmigrate.digest.model import Digest, QueryClass
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams
from dbmigrate.procedures.schema_swap.replay import explainable, hint_warnings, hinted_indexes


def qc(example: str, tables=("app.orders",), count=10) -> QueryClass:
    return QueryClass(checksum=str(abs(hash(example))), fingerprint=example.lower(), distillate="SELECT app.orders",
                      count=count, total_time=0.1, avg=0.01, p95=0.01, p99=None, max=0.02, example=example,
                      tables=tuple(tables))


def digest(*classes: QueryClass) -> Digest:
    return Digest(classes=list(classes), query_count=sum(c.count for c in classes), total_time=1, avg=0.01,
                  p95=None, p99=None)


def test_index_names_are_read_from_every_kind_of_hint():
    assert hinted_indexes("SELECT * FROM t USE INDEX (`ix_a`, ix_b) WHERE a=1") == {"ix_a", "ix_b"}
    assert hinted_indexes("SELECT * FROM t FORCE KEY FOR ORDER BY (Ix_C) ORDER BY c") == {"ix_c"}
    assert hinted_indexes("SELECT * FROM t IGNORE INDEX () WHERE a=1") == set()
    assert hinted_indexes("SELECT 'USE INDEX' FROM t") == set()


def test_a_hint_on_an_index_the_ddl_drops_is_a_warning_and_others_are_not():
    params = SchemaSwapParams(ddl=["DROP INDEX ix_amount ON app.orders"])
    d = digest(qc("SELECT id FROM app.orders USE INDEX (ix_amount) WHERE amount > 3", count=361),
               qc("SELECT id FROM app.orders USE INDEX (ix_other) WHERE amount > 3"),
               qc("SELECT id FROM app.items USE INDEX (ix_amount) WHERE x = 1", tables=("app.items",)))
    warnings = hint_warnings(d, params)
    assert len(warnings) == 1 and "ix_amount" in warnings[0] and "361 in the digest" in warnings[0], warnings


def test_only_single_application_statements_are_explained():
    assert explainable("SELECT 1") and explainable("  update t set a=1 where id=2") and explainable("WITH x AS (SELECT 1) SELECT * FROM x")
    assert not explainable("DROP TABLE t") and not explainable("SET SESSION x=1")
    assert not explainable("SELECT 1; DROP TABLE t")


def test_a_hint_on_an_index_renamed_away_is_a_warning_too():
    params = SchemaSwapParams(ddl=["ALTER TABLE app.orders RENAME INDEX ix_amount TO ix_amount2"])
    d = digest(qc("SELECT id FROM app.orders FORCE INDEX (ix_amount) WHERE amount > 3"))
    assert len(hint_warnings(d, params)) == 1


def test_the_hint_check_reads_pt_query_digest_table_names_and_fingerprints_and_names_the_class():
    # pt-query-digest names tables `schema`.`table` (backticks); the DDL names schema.table; the sample was
    # redacted away and only the fingerprint keeps the hint, with spaces and backticks.
    params = SchemaSwapParams(ddl=["ALTER TABLE ca.authz DROP INDEX regID_identifier_status_expires_idx"])
    hinted = QueryClass(checksum="C1", fingerprint="select id from authz use index ( `regid_identifier_status_expires_idx` )"
                        " where regid = ?", distillate="SELECT authz", count=66, total_time=0.1, avg=0.01, p95=0.01,
                        p99=None, max=0.02, example="", tables=("`ca`.`authz`",))
    other = qc("SELECT id FROM authz FORCE KEY FOR JOIN (`a`, b) WHERE x = 1", tables=("`ca`.`authz`",))
    warnings = hint_warnings(digest(hinted, other), params)
    assert len(warnings) == 1, warnings
    assert "regid_identifier_status_expires_idx" in warnings[0] and "use index" in warnings[0]
    assert "66 in the digest" in warnings[0]
    assert hinted_indexes("select * from t ignore index for group by ( `x` ,y) use key(z)") == {"x", "y", "z"}
