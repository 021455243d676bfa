"""Timeouts and sizes have upper bounds: a huge value is refused when the playbook is read,
not met as an OverflowError in the middle of a cutover."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dbmigrate.procedures.consolidate.context import ConsolidateParams
from dbmigrate.procedures.promote.procedure import PromoteParams
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams

HUGE = 1e20


@pytest.mark.parametrize("field", ["catchup_timeout_s", "fence_timeout_s", "fence_drain_timeout_s", "drain_timeout_s",
                                   "replica_timeout_s", "verify_timeout_s", "max_trx_age_s", "lag_wait_s",
                                   "baseline_seconds", "guard_sample_s", "max_lag_ms", "converge_timeout_s",
                                   "converge_max_trx", "converge_max_trx_rows", "converge_max_backlog_bytes",
                                   "probe_timeout_s", "router_doubt_wait_s", "fence_expiry_s"])
def test_promote_refuses_a_huge_bound(field):
    with pytest.raises(ValidationError):
        PromoteParams(candidate="db2", **{field: HUGE})


def test_promote_refuses_a_huge_warm_up_time():
    with pytest.raises(ValidationError):
        PromoteParams(candidate="db2", warm={"method": "scan", "seconds": HUGE})


@pytest.mark.parametrize("field", ["ddl_timeout_s", "drain_timeout_s", "catchup_timeout_s", "replica_timeout_s",
                                   "verify_timeout_s", "max_trx_age_s", "max_lag_ms", "fence_drain_timeout_s"])
def test_schema_swap_refuses_a_huge_bound(field):
    with pytest.raises(ValidationError):
        SchemaSwapParams(ddl=["ALTER TABLE app.t ADD COLUMN c INT"], **{field: HUGE})


@pytest.mark.parametrize("field", ["max_lag_s", "gate_timeout_s", "catchup_timeout_s", "fence_drain_timeout_s",
                                   "drain_timeout_s", "seed_timeout_s"])
def test_consolidate_refuses_a_huge_bound(field):
    with pytest.raises(ValidationError):
        ConsolidateParams(plan="plan.yaml", **{field: HUGE})


def test_the_defaults_are_within_the_bounds():
    PromoteParams(candidate="db2")
    SchemaSwapParams(ddl=["ALTER TABLE app.t ADD COLUMN c INT"])
    ConsolidateParams(plan="plan.yaml")
