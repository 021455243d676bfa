"""Creating a planned instance on its host: a protocol that whoever drives the run fills in.

Procedures do not know how a host makes a server (a local sandbox for rehearsals,
an automation system in production); the caller registers a provisioner for a kind
of host. A planned instance whose host has no provisioner must already answer
(created beforehand, e.g. by a before_phase hook).
"""

from __future__ import annotations

from typing import Protocol

from dbmigrate.procedures.consolidate.plan import PlannedInstance

SANDBOX = "sandbox"  # inventory hosts with `sandbox:` (rehearsals on this machine)


class Provisioner(Protocol):
    def create(self, instance: PlannedInstance) -> str:
        """Create and start `instance` with the plan's settings; return host:port where it answers."""
        ...


class InstanceControl(Protocol):
    """What physical seeding needs beyond creation: the real datadir, and stop/start.
    A provisioner that offers these three methods lets instances be seeded physically."""

    def datadir(self, instance: PlannedInstance) -> str:
        """The datadir the instance runs on (on its host)."""
        ...

    def stop(self, instance: PlannedInstance) -> None:
        """Shut the instance down cleanly and wait until it has exited."""
        ...

    def start(self, instance: PlannedInstance) -> str:
        """Start it again on its datadir; return host:port once it answers."""
        ...


_PROVISIONERS: dict[str, Provisioner] = {}


def register_provisioner(kind: str, provisioner: Provisioner) -> None:
    _PROVISIONERS[kind] = provisioner


def host_kind(instance: PlannedInstance) -> str | None:
    return SANDBOX if instance.sandbox else None


def provisioner_for(instance: PlannedInstance) -> Provisioner | None:
    kind = host_kind(instance)
    return _PROVISIONERS.get(kind) if kind else None


def instance_control(instance: PlannedInstance) -> InstanceControl | None:
    """The provisioner of this instance's host when it can stop and start instances."""
    p = provisioner_for(instance)
    if p is not None and all(callable(getattr(p, m, None)) for m in ("datadir", "stop", "start")):
        return p  # type: ignore[return-value]
    return None


def sandbox_extra(config: dict[str, str]) -> dict[str, str]:
    """The plan's settings a sandbox instance needs beyond its defaults (strict mode, filters)."""
    return {k: v for k, v in config.items() if k == "gtid_strict_mode" or ".replicate_" in k}
