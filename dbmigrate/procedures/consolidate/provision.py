"""Creating a planned instance on its host: a protocol that whoever drives the run fills in.

Procedures do not know how a host makes a server (a local sandbox for rehearsals,
an automation system in production); the caller registers a provisioner for a kind
of host. A planned instance whose host has no provisioner must already answer
(created beforehand: `consolidate provision`, or a before_phase hook).

Stopping and starting an instance (what physical seeding needs) comes from the
sandbox's provisioner in rehearsals, and elsewhere from the host layer: the
instance's `mariadb@NAME` unit, or the mariadbd its pid file names (HostControl).
"""

from __future__ import annotations

from typing import Protocol

from dbmigrate.hosts import Host, NoAccessHost
from dbmigrate.hosts.services import InstanceService
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


class HostControl:
    """Stop and start a provisioned instance through its host (systemd unit or direct mariadbd),
    on the plan's datadir, socket and pid file."""

    def __init__(self, host: Host, instance: PlannedInstance, timeout_s: float = 600):
        self.host, self.timeout_s = host, timeout_s
        self.service = InstanceService(host, instance.name, instance.socket, pid_file(instance))

    def how(self) -> str:
        return self.service.detect()

    def datadir(self, instance: PlannedInstance) -> str:
        return instance.datadir

    def stop(self, instance: PlannedInstance) -> None:
        self.service.stop(self.timeout_s)

    def start(self, instance: PlannedInstance) -> str:
        self.service.start(self.timeout_s)
        return f"{instance.address}:{instance.port}"


def pid_file(instance: PlannedInstance) -> str:
    """Where the plan's option group puts the pid file (beside the socket)."""
    return instance.config.get("pid_file") or f"{instance.socket.rsplit('/', 1)[0]}/{instance.name}.pid"


def instance_control(instance: PlannedInstance, host: Host | None = None,
                     timeout_s: float = 600) -> InstanceControl | None:
    """What can stop and start this instance: its host's provisioner when that can (sandbox),
    else the host layer where the tool has access to the host and the plan names the socket."""
    p = provisioner_for(instance)
    if p is not None and all(callable(getattr(p, m, None)) for m in ("datadir", "stop", "start")):
        return p  # type: ignore[return-value]
    if p is None and not instance.sandbox and host is not None and not isinstance(host, NoAccessHost) \
            and instance.socket and instance.datadir:
        return HostControl(host, instance, timeout_s)
    return None


def sandbox_extra(config: dict[str, str]) -> dict[str, str]:
    """The plan's settings a sandbox instance needs beyond its defaults (strict mode, filters)."""
    return {k: v for k, v in config.items() if k == "gtid_strict_mode" or ".replicate_" in k}
