"""Parameters of a schema swap: the DDL, its checks, warm-up and the switchover's bounds."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dbmigrate.procedures.kit.switchover.settings import SwitchoverParams
from dbmigrate.procedures.kit.warmup import WarmSpec
from dbmigrate.procedures.schema_swap import ddl as schema_ddl
from dbmigrate.procedures.schema_swap.ddl import Ddl, Expectation


# -- parameters -------------------------------------------------------------------

class VerifySpec(BaseModel):
    """One explicit check: the table exists, or has (or, with absent, lacks) a column or an index."""

    model_config = ConfigDict(extra="forbid")
    table: str = Field(description="schema.table")
    column: Optional[str] = None
    index: Optional[str] = None
    absent: bool = False

    @field_validator("table")
    @classmethod
    def _qualified(cls, v: str) -> str:
        schema, dot, name = v.partition(".")
        if not dot or not schema or not name:
            raise ValueError(f"'{v}' is not schema.table")
        return v

    @model_validator(mode="after")
    def _one_target(self) -> "VerifySpec":
        if self.column and self.index:
            raise ValueError("give column or index, not both (one check per item)")
        return self

    def expectation(self) -> Expectation:
        return Expectation(self.table, column=self.column, index=self.index, absent=self.absent)


class SwapWarmSpec(WarmSpec):
    """Warm each altered side before it takes reads again; the warm-up gate stands before its return.
    Same fields as promote's warm-up; a side is a replica of the same data, so scan by default."""

    method: Literal["scan", "replay", "dump-load", "none"] = Field(
        "scan", description="none: only the gate (the side must already be warm)")
    tables: list[str] = Field(default_factory=list, description="schema.table; default: the tables the DDL alters")


class SchemaSwapParams(SwitchoverParams):
    """The switchover's bounds come from SwitchoverParams (the same in every procedure that
    switches over); max_lag_ms also bounds a side's return, and kill_app_sessions also ends a
    drained side's sessions."""

    ddl: list[str] = Field(min_length=1, description="ALTER TABLE / CREATE INDEX / ... on schema-qualified tables")
    undo_ddl: list[str] = Field(default_factory=list, description="inverse statements used by rollback, if any")
    verify: list[VerifySpec] = Field(default_factory=list, description="checks in addition to the automatic ones")
    auto_verify: bool = Field(True, description="verify what the DDL implies (columns, indexes, ROW compatibility)")
    warm: Optional[SwapWarmSpec] = None
    drain_timeout_s: float = Field(30, ge=0, le=3600, description="bound for a side's client sessions to end "
                                                                   "(kill_app_sessions: then ended)")
    ddl_timeout_s: float = Field(3600, gt=0, le=7 * 86400, description="bound for each DDL statement on one server")
    order: Literal["replicas-then-primary"] = "replicas-then-primary"
    primary: Literal["switchover", "skip"] = "switchover"
    candidate: Optional[str] = Field(None, description="replica promoted for the primary's side (default: the first)")
    switch_back: bool = Field(True, description="after the old primary is altered, make it the primary again")
    replay_digest: Optional[str] = Field(None, description="a digest of the application's queries (dbmigrate digest "
                                         "capture, or pt-query-digest JSON; relative to the playbook): each class's "
                                         "sample is EXPLAINed on a side before it returns, and a new error keeps "
                                         "the side out (the run pauses)")
    replay_max_classes: int = Field(500, ge=1, le=100_000, description="the busiest classes replayed, at most")
    replay_capture_s: float = Field(3, ge=0, le=600, description="without replay_digest: the readers' queries are "
                                    "captured on the wire (tcpdump on the side's host, dissected by tshark) for "
                                    "this long on each side before it leaves the pool, and tried on it before it "
                                    "returns; 0: not captured (a side then returns untried)")

    @field_validator("ddl")
    @classmethod
    def _accepted(cls, v: list[str]) -> list[str]:
        for i, statement in enumerate(v):
            try:
                schema_ddl.classify(statement)
            except schema_ddl.DdlRefused as e:
                raise ValueError(f"statement {i + 1} refused: {e.message}" + (f" (hint: {e.hint})" if e.hint else ""))
        return v

    @field_validator("undo_ddl")
    @classmethod
    def _undo_is_ddl(cls, v: list[str]) -> list[str]:
        for i, statement in enumerate(v):
            try:
                schema_ddl.check_undo(statement)
            except schema_ddl.DdlRefused as e:
                raise ValueError(f"undo statement {i + 1} refused: {e.message}")
        return v

    def statements(self) -> list[Ddl]:
        return [schema_ddl.classify(s) for s in self.ddl]

    def warm_tables(self) -> list[str]:
        if self.warm is not None and self.warm.tables:
            return list(self.warm.tables)
        return schema_ddl.tables_of(d for d in self.statements() if d.kind != "create-table")
