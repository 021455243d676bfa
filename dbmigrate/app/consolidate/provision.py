"""Use case `consolidate provision`: a plan's instances created on their hosts by Ansible.

Generates the inventory and playbook (`procedures/consolidate/ansible_files.py`),
runs `ansible-playbook` with the accounts' SQL in a private vars file that exists
for the run only, then proves each instance answers SQL at the plan's address and
port with the plan's server_id. Hosts are reached as the inventory declares
(`hosts: NAME: access:`, `host_access:`, `defaults.access`); a loopback host is
local. Nothing is guessed for a remote host without declared access.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from dbmigrate.config import Access, DockerAccess, Inventory, SshAccess, load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.inspector import Inspector
from dbmigrate.db.provisioning import accounts_script, count_accounts_query, tool_accounts
from dbmigrate.exceptions import DbmigrateError, UsageError
from dbmigrate.hosts.ansible import Recap, private_vars_file, run_playbook
from dbmigrate.hosts.resolve import is_this_machine
from dbmigrate.procedures.consolidate import ansible_files as files
from dbmigrate.procedures.consolidate.model import ConsolidationPlan, PlannedInstance
from dbmigrate.procedures.consolidate.resources import load_plan
from dbmigrate.redact import register_secret

SYSTEMD_MARK = Path("/run/systemd/system")  # exists only where systemd is the running init


class ProvisionFailed(DbmigrateError):
    """Ansible finished but an instance does not answer as the plan says."""


@dataclass
class ProvisionRequest:
    plan: Path
    inventory: Path
    cluster: str | None = None
    out_dir: Path | None = None
    start: files.StartMode | None = None  # systemd | direct | None: direct for local hosts without systemd
    conf_dir: str = files.CONF_DIR
    mariadbd_user: str = "mysql"
    install_packages: bool = True
    dry_run: bool = False


@dataclass
class ProvisionResult:
    out_dir: Path
    files: dict[str, str]  # file name -> text (the vars file described, never shown)
    dry_run: bool
    recap: Recap | None = None
    instances: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "dry_run": self.dry_run, "files": self.files,
                "recap": self.recap.hosts if self.recap else None, "instances": self.instances}


def _cluster_of(inv: Inventory, plan: ConsolidationPlan, cluster: str | None) -> str:
    if cluster:
        inv.cluster(cluster)
        return cluster
    found: set[str] = set()
    for src in sorted({s.source for s in plan.shards}):
        try:
            found.add(inv.find_server(src)[0])
        except DbmigrateError:
            continue
    if len(found) != 1:
        raise UsageError("say which inventory cluster's replication account the instances get: --cluster NAME",
                         hint=f"clusters: {', '.join(inv.clusters)}")
    return found.pop()


def _access(inv: Inventory, host: str, address: str) -> Access | None:
    spec = inv.hosts.get(host)
    if spec is not None and spec.access is not None:
        return spec.access
    for key in (host, address):
        if key in inv.host_access:
            return inv.host_access[key]
    return inv.defaults.access


def connection_for(inv: Inventory, host: str, address: str, start: files.StartMode | None) -> files.HostConnection:
    access = _access(inv, host, address)
    if access is None and is_this_machine(address):
        access_kind = "local"
    elif access is None:
        raise UsageError(f"host {host} ({address}): no access declared, so it cannot be provisioned",
                         hint=f"declare it: hosts: {host}: access: {{kind: ssh, user: ...}} (or host_access:)")
    else:
        access_kind = access.kind
    if access_kind == "none":
        raise UsageError(f"host {host} is declared `access: none`: the tool may not enter it",
                         hint="create its instances yourself from the plan's settings, or declare ssh access")
    if access_kind == "local":
        mode = start or ("systemd" if SYSTEMD_MARK.exists() else "direct")
        return files.HostConnection(host, {"ansible_connection": "local"}, mode, become=os.geteuid() != 0)
    if isinstance(access, DockerAccess):
        # A container: `docker exec` as root (nothing to become), and no systemd runs in it.
        dv: dict[str, Any] = {"ansible_connection": "dbmigrate_docker", "ansible_host": access.container,
                              "ansible_pipelining": True}  # each module in one exec, no temp file copied first
        if access.engine:
            dv["ansible_docker_engine"] = access.engine
        return files.HostConnection(host, dv, start or "direct", become=False)
    if not isinstance(access, SshAccess):
        raise UsageError(f"host {host}: access kind {access_kind} cannot provision instances")
    v: dict[str, Any] = {"ansible_connection": "ssh", "ansible_host": access.address or address}
    if access.user:
        v["ansible_user"] = access.user
    if access.port:
        v["ansible_port"] = access.port
    if access.identity_file:
        key = Path(access.identity_file).expanduser()
        v["ansible_ssh_private_key_file"] = str(key if key.is_absolute() else inv.base / key)
    opts = [f"-o ConnectTimeout={int(access.connect_timeout)}"]
    if access.jump_host:
        opts.append(f"-o ProxyJump={access.jump_host}")
    if access.known_hosts_file:
        known = Path(access.known_hosts_file).expanduser()
        opts.append(f"-o UserKnownHostsFile={known if known.is_absolute() else inv.base / known}")
    if access.strict_host_key_checking:
        opts.append(f"-o StrictHostKeyChecking={access.strict_host_key_checking}")
    opts += [f"-o {k}={val}" for k, val in access.options.items()]
    v["ansible_ssh_common_args"] = " ".join(opts)
    # Logged in as root there is nothing to become (and sudo may not even be installed).
    return files.HostConnection(host, v, start or "systemd", become=access.user != "root")


def _admin(inv: Inventory) -> Credentials:
    ref = inv.defaults.credentials
    if ref is None:
        raise UsageError(f"{inv.path}: defaults.credentials is needed: the new instances get that account")
    return ref.resolve(inv.base)


def provision(req: ProvisionRequest, log: Callable[[str], None] = lambda m: None,
              progress: Callable[[str], None] | None = None) -> ProvisionResult:
    """`log` gets Ansible's every line; `progress` a line per task and at least one every 10 s."""
    if req.start not in (None, "systemd", "direct"):
        raise UsageError(f"--start {req.start}: give systemd or direct")
    plan = load_plan(req.plan)
    if not plan.instances:
        raise UsageError(f"{req.plan} plans no instance")
    if any(not i.socket or not i.server_id for i in plan.instances):
        raise UsageError(f"{req.plan} has no socket or server_id per instance (a version 1 plan)",
                         hint="write it again: dbmigrate consolidate plan ... --out PLAN")
    inv = load_inventory(req.inventory)
    cluster = _cluster_of(inv, plan, req.cluster)
    admin, repl = _admin(inv), inv.replication_credentials(cluster)
    for secret in (admin.password, repl.password):
        register_secret(secret)
    accounts = tool_accounts(admin.user, admin.password or "", repl.user, repl.password or "")
    layout = files.ProvisionLayout(conf_dir=req.conf_dir, mariadbd_user=req.mariadbd_user,
                                   install_packages=req.install_packages, account_users=[a.user for a in accounts])
    hosts = {i.host: i.address for i in plan.instances}
    connections = {h: connection_for(inv, h, a, req.start) for h, a in sorted(hosts.items())}
    out_dir = req.out_dir or req.plan.resolve().parent / f"{req.plan.stem}-provision"
    inventory_text = files.inventory_text(files.inventory(plan, connections, layout, req.plan.name))
    playbook_text = files.playbook_text(count_accounts_query(layout.account_users))
    shown = {"inventory.yml": inventory_text, "provision.yml": playbook_text,
             "secrets.yml": f"# not written here: created mode 0600 in a private directory for the run only, then "
                            f"removed; holds the SQL that creates {', '.join(layout.account_users)}\n"}
    result = ProvisionResult(out_dir, shown, req.dry_run)
    if req.dry_run:
        return result
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in ("inventory.yml", "provision.yml"):
        (out_dir / name).write_text(shown[name])
    private = Path(tempfile.mkdtemp(prefix="dbm-ansible-"))
    try:
        vars_file = private_vars_file(private, yaml.safe_dump({"dbmigrate_accounts_sql": accounts_script(accounts)}))
        result.recap = run_playbook(out_dir, out_dir / "inventory.yml", out_dir / "provision.yml", vars_file, log=log,
                                    progress=progress)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    result.instances = [check_instance(i, admin, inv.defaults.connect_timeout) for i in plan.instances]
    wrong = [f"{i['name']}: {i['problem']}" for i in result.instances if i.get("problem")]
    if wrong:
        raise ProvisionFailed("after provisioning: " + "; ".join(wrong),
                              hint=f"the generated files are in {out_dir}")
    return result


def check_instance(inst: PlannedInstance, admin: Credentials, connect_timeout: float) -> dict[str, Any]:
    """The instance answers SQL at the plan's address and port, with the plan's server_id."""
    out: dict[str, Any] = {"name": inst.name, "host": inst.host, "address": f"{inst.address}:{inst.port}",
                           "server_id": inst.server_id}
    try:
        with Server(inst.name, inst.address, inst.port, admin, connect_timeout=connect_timeout, retries=2) as srv:
            insp = Inspector(srv)
            port, sid, ro = int(insp.variable("port")), int(insp.variable("server_id")), insp.read_only()
    except DbmigrateError as e:
        out["problem"] = f"does not answer at {out['address']}: {e.message}"
        return out
    out.update({"answered": True, "read_only": ro})
    if port != inst.port or sid != inst.server_id:
        out["problem"] = f"answers with port {port} and server_id {sid}, the plan says {inst.port} and {inst.server_id}"
    return out
