"""Who creates the instances a consolidation plan puts on a kind of host, for runs in this process.

Procedures only know the protocol; a front end that manages hosts of its own (the CLI's
local sandboxes) names who creates instances on them, and a run installs it when its
procedure plans instances. Nothing is imported until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from dbmigrate.procedures.consolidate.provision import Provisioner

_sandbox: Callable[[], "Provisioner"] | None = None
PLANS_INSTANCES = ("consolidate",)  # procedures whose plans put instances on hosts


def provision_sandbox_hosts_with(factory: Callable[[], "Provisioner"]) -> None:
    """Instances planned on hosts marked `sandbox:` are created (and stopped, started) by what
    `factory` returns, once a run needs it."""
    global _sandbox
    _sandbox = factory


def install_provisioners(procedure: str) -> None:
    """Before a run of `procedure` prepares: the provisioners its plan may need."""
    if procedure not in PLANS_INSTANCES or _sandbox is None:
        return
    from dbmigrate.procedures.consolidate.provision import SANDBOX, register_provisioner

    register_provisioner(SANDBOX, _sandbox())
