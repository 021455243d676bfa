"""What a procedure may read of the playbook its run was started from.

A protocol, so that the engine's run context can carry the playbook and procedures can
read it without importing the playbook module (which imports the procedures' registry).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Protocol, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from dbmigrate.config import Inventory


class PlaybookView(Protocol):
    @property
    def path(self) -> Path: ...

    @property
    def procedure(self) -> str: ...

    @property
    def cluster(self) -> str: ...

    @property
    def params(self) -> BaseModel: ...

    @property
    def base_dir(self) -> Path: ...

    @property
    def inventory_path(self) -> Optional[Path]: ...

    @property
    def guard_section(self) -> Optional[BaseModel]:
        """The playbook's `guard:` section as written (the guard validates its own rules)."""
        ...

    def load_inventory(self) -> "Optional[Inventory]":
        """The playbook's inventory, its cluster checked (None when the playbook names none)."""
        ...

    def line_of(self, loc: tuple[str | int, ...]) -> int:
        """The playbook line a field was written on, for errors that name it (0: unknown)."""
        ...


P = TypeVar("P", bound=BaseModel)


def typed_params(playbook: PlaybookView, kind: type[P]) -> P:
    """The playbook's params as its procedure's model (the registry validated them with it)."""
    params = playbook.params
    if not isinstance(params, kind):
        raise TypeError(f"playbook params are {type(params).__name__}, not {kind.__name__}")
    return params
