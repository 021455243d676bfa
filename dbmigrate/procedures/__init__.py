"""Built-in procedures. Each module registers itself with @registry.register.

Modules are imported on first registry lookup, not at package import, so
`dbmigrate --help` stays fast and one broken procedure cannot break the
others' imports at startup. Adding a procedure is one line in BUILTIN.
"""

from __future__ import annotations

import importlib

BUILTIN: tuple[str, ...] = (
    "dbmigrate.procedures.promote.procedure",
    "dbmigrate.procedures.schema_swap.procedure",
    "dbmigrate.procedures.consolidate.procedure",
)

_loaded = False


def load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in BUILTIN:
        importlib.import_module(module)
