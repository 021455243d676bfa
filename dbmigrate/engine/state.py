"""Typed, versioned run state: a procedure's journaled facts as one model.

Each procedure (and each kit part that keeps facts, like the cutover) declares a
`TypedState` subclass. It is saved whole under its KEY in the run's state store
(`RunState`), with the schema version that wrote it, so that a resumed run reads
exactly what the crashed one wrote, and a run started by another version is
either migrated or refused with a clear message, never misread.

Version 0 is the flat string keys dbmigrate wrote before typed state; subclasses
map them in `from_flat`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, ClassVar, Iterator, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from dbmigrate import __version__
from dbmigrate.exceptions import UsageError

S = TypeVar("S", bound="TypedState")


class StateStore(Protocol):
    """What a typed state needs of the journal (RunState has it)."""

    def get(self, key: str, default: Any = None) -> Any: ...
    def set(self, key: str, value: Any) -> None: ...
    def items(self) -> dict[str, Any]: ...


class TypedState(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    KEY: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    # field -> flat key written by version 0, for fields that map one to one.
    FLAT_KEYS: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> dict[str, Any]:
        """Version 0 (flat keys) -> this version's fields. Override for keys that need more."""
        return {f: flat[k] for f, k in cls.FLAT_KEYS.items() if flat.get(k) is not None}

    @classmethod
    def migrate(cls, version: int, data: dict[str, Any]) -> dict[str, Any] | None:
        """An older version's fields -> this version's; None when this version cannot read them."""
        return None

    @classmethod
    def load(cls: type[S], store: StateStore) -> S:
        record = store.get(cls.KEY)
        if record is None:
            return cls.model_validate(cls.from_flat(dict(store.items())))
        version, written_by = record.get("version"), record.get("written_by", "an unknown version")
        data = record.get("data") or {}
        if version == cls.VERSION:
            return cls.model_validate(data)
        migrated = cls.migrate(version, data) if isinstance(version, int) and version < cls.VERSION else None
        if migrated is None:
            newer = isinstance(version, int) and version > cls.VERSION
            raise UsageError(
                f"this run's {cls.KEY} state was written by dbmigrate {written_by} (state version {version}); "
                f"dbmigrate {__version__} reads version {cls.VERSION}" + (" and older" if newer else ""),
                hint=f"finish it with dbmigrate {written_by}: `dbmigrate resume RUN` or `dbmigrate rollback RUN`; "
                     "or start a new run with this version")
        return cls.model_validate(migrated)

    def save(self, store: StateStore) -> None:
        store.set(self.KEY, {"version": self.VERSION, "written_by": __version__,
                             "data": self.model_dump(mode="json")})

    @classmethod
    @contextmanager
    def edit(cls: type[S], store: StateStore) -> Iterator[S]:
        """Load, change, save: `with CutoverState.edit(ctx.state) as s: s.fence_pos = pos`."""
        state = cls.load(store)
        yield state
        state.save(store)
