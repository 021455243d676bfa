"""Built-in procedures. Each module registers itself with @registry.register.

Modules are imported on first registry lookup, not at package import, so
`dbmigrate --help` stays fast and one broken procedure cannot break the
others' imports at startup. A lookup by name imports that procedure's module alone (a run
of promote does not load consolidation's models). Adding a procedure is one line in BUILTIN.
"""

from __future__ import annotations

import importlib

BUILTIN: dict[str, str] = {  # the name a procedure registers -> its module
    "promote": "dbmigrate.procedures.promote.procedure",
    "schema-swap": "dbmigrate.procedures.schema_swap.procedure",
    "consolidate": "dbmigrate.procedures.consolidate.procedure",
}

_loaded = False


def load_builtin(name: str | None = None) -> None:
    """Import the built-in procedure of this name (all of them without one, or for a name
    that is not built in, so that the error can list every known procedure)."""
    global _loaded
    if name in BUILTIN:
        importlib.import_module(BUILTIN[name])
        return
    if _loaded:
        return
    _loaded = True
    for module in BUILTIN.values():
        importlib.import_module(module)
