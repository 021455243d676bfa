"""Client for orchestrator's HTTP API, and the mapping of its instances into our cluster model.

Shapes (openark/orchestrator docs/using-the-web-api.md, checked against a real
orchestrator on MariaDB 10.11):
- `/api/clusters` and `/api/cluster/:name` answer bare JSON arrays (names; Instance objects);
- `/api/instance/:host/:port` answers one Instance object;
- `/api/discover/...` and `/api/graceful-master-takeover-auto/...` answer
  `{Code, Message, Details}`, where Code "ERROR" is a failure even with HTTP 200.

Basic auth comes from ORCHESTRATOR_USER / ORCHESTRATOR_PASSWORD; the password is
registered with the redactor and never appears in messages.
"""

from __future__ import annotations

import os
from typing import Any
from typing import TYPE_CHECKING
from urllib.parse import quote

from dbmigrate.db.flavor import detect
from dbmigrate.exceptions import ConnectionFailed, DbmigrateError
from dbmigrate.redact import redact, register_secret
from dbmigrate.topology.discovery import Cluster, Node, assess, normalize_address
from dbmigrate.topology.probe import ServerFacts

if TYPE_CHECKING:
    import httpx


class OrchestratorError(DbmigrateError):
    """orchestrator answered, but refused or failed the request."""


class OrchestratorUnreachable(ConnectionFailed):
    """orchestrator did not answer (connection refused, timeout, DNS)."""


class OrchestratorClient:
    def __init__(self, url: str, *, timeout: float = 10.0, takeover_timeout: float = 60.0,
                 user: str | None = None, password: str | None = None,
                 transport: httpx.BaseTransport | None = None):
        import httpx  # only where an inventory names orchestrator: it costs every start otherwise

        self.url = url.rstrip("/")
        self.takeover_timeout = takeover_timeout
        user = user if user is not None else os.environ.get("ORCHESTRATOR_USER")
        password = password if password is not None else os.environ.get("ORCHESTRATOR_PASSWORD")
        auth = None
        if user:
            register_secret(password)
            auth = httpx.BasicAuth(user, password or "")
        self._http = httpx.Client(base_url=self.url, timeout=timeout, auth=auth, transport=transport,
                                  headers={"Accept": "application/json", "User-Agent": "dbmigrate"})

    # -- plumbing ------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "OrchestratorClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, timeout: float | None = None) -> Any:
        import httpx

        what = f"orchestrator {self.url}{path}"
        try:
            r = self._http.get(path, timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.TimeoutException:
            raise OrchestratorUnreachable(f"{what}: no answer within the timeout",
                                          hint="is orchestrator running and reachable from here?") from None
        except httpx.TransportError as e:
            raise OrchestratorUnreachable(f"cannot reach {what}: {redact(str(e)) or type(e).__name__}",
                                          hint="check orchestrator_url in the inventory and that the service runs") from None
        if r.status_code in (401, 403):
            raise OrchestratorError(f"{what}: HTTP {r.status_code} (not authorised)",
                                    hint="set ORCHESTRATOR_USER and ORCHESTRATOR_PASSWORD for basic auth")
        try:
            body = r.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("Code") == "ERROR":
            raise OrchestratorError(f"{what}: {redact(str(body.get('Message') or 'ERROR without a message'))}",
                                    hint="see orchestrator's audit log (/api/audit) for details")
        if r.status_code >= 400:
            text = body.get("Message") if isinstance(body, dict) else r.text[:200]
            raise OrchestratorError(f"{what}: HTTP {r.status_code}: {redact(str(text)).strip()}")
        if body is None:
            raise OrchestratorError(f"{what}: answer is not JSON: {redact(r.text[:200])!r}",
                                    hint="is orchestrator_url the API base (http://host:3000), not a proxy page?")
        return body

    @staticmethod
    def _key(host: str, port: int) -> str:
        return f"{quote(host, safe='')}/{int(port)}"

    @staticmethod
    def _details(body: Any, what: str) -> Any:
        if not isinstance(body, dict) or "Code" not in body:
            raise OrchestratorError(f"orchestrator {what}: unexpected answer {str(body)[:200]!r}",
                                    hint="expected {Code, Message, Details}")
        return body.get("Details")

    # -- API -----------------------------------------------------------------
    def clusters(self) -> list[str]:
        body = self._get("/api/clusters")
        if not isinstance(body, list):
            raise OrchestratorError(f"orchestrator /api/clusters: expected a list, got {type(body).__name__}")
        return [str(c) for c in body]

    def cluster(self, name: str) -> list[dict[str, Any]]:
        body = self._get(f"/api/cluster/{quote(name, safe=':')}")
        if not isinstance(body, list):
            raise OrchestratorError(f"orchestrator /api/cluster/{name}: expected a list, got {type(body).__name__}")
        if not body:
            raise OrchestratorError(f"orchestrator knows no instance in cluster '{name}'",
                                    hint="list clusters with /api/clusters, or discover one with /api/discover/HOST/PORT")
        return body

    def instance(self, host: str, port: int) -> dict[str, Any]:
        body = self._get(f"/api/instance/{self._key(host, port)}")
        if not isinstance(body, dict) or "Key" not in body:
            raise OrchestratorError(f"orchestrator /api/instance/{host}/{port}: unexpected answer {str(body)[:200]!r}")
        return body

    def cluster_name_of(self, host: str, port: int) -> str:
        return str(self.instance(host, port)["ClusterName"])

    def discover(self, host: str, port: int) -> dict[str, Any]:
        """Ask orchestrator to (re)discover an instance; returns the Instance in Details."""
        return self._details(self._get(f"/api/discover/{self._key(host, port)}"), "discover") or {}

    def graceful_takeover_auto(self, cluster: str, host: str, port: int) -> dict[str, Any]:
        """Planned switchover to host:port; orchestrator also restarts the old primary's replication."""
        path = f"/api/graceful-master-takeover-auto/{quote(cluster, safe=':')}/{self._key(host, port)}"
        return self._details(self._get(path, timeout=self.takeover_timeout), "graceful-master-takeover-auto") or {}


def takeover_sentence(details: Any, candidate: str, host: str, port: int, seconds: float) -> str:
    """The step's sentence for a graceful takeover: who orchestrator promoted and how long it took
    (not orchestrator's whole answer)."""
    wanted = normalize_address(host, port)
    promoted = _key_address(details.get("Key")) if isinstance(details, dict) else None
    took = f"in {seconds:.1f} s"
    if promoted is None:
        return f"orchestrator took over for {candidate} ({wanted}) {took}; its answer named no instance"
    if promoted != wanted:
        return f"orchestrator promoted {promoted}, not the candidate {candidate} ({wanted}), {took}"
    return f"orchestrator promoted {candidate} ({promoted}) {took}"


# ---- mapping orchestrator instances into the cluster model --------------------

def _key_address(key: dict[str, Any] | None) -> str | None:
    if not key or not key.get("Hostname"):
        return None
    return normalize_address(str(key["Hostname"]), int(key.get("Port") or 0))


def _nullable(v: Any) -> int | None:
    if isinstance(v, dict):
        return int(v.get("Int64", 0)) if v.get("Valid") else None
    return None if v is None else int(v)


def _thread(inst: dict[str, Any], new: str, old: str) -> str | None:
    v = inst.get(new, inst.get(old))
    return None if v is None else ("Yes" if v else "No")


def node_from_instance(inst: dict[str, Any], name: str | None = None) -> Node:
    address = _key_address(inst.get("Key")) or "?"
    source = _key_address(inst.get("MasterKey"))
    version = str(inst.get("Version") or "")
    facts = ServerFacts(
        name or address, address, flavor=detect(version).name, version=version,
        server_id=int(inst.get("ServerID") or 0), read_only=bool(inst.get("ReadOnly")),
        gtid_executed=str(inst.get("ExecutedGtidSet") or ""), binlog_format=str(inst.get("Binlog_format") or ""),
        log_bin=inst.get("LogBinEnabled"),
        log_slave_updates=inst.get("LogReplicationUpdatesEnabled", inst.get("LogSlaveUpdatesEnabled")),
        source=source,
        io_running=_thread(inst, "ReplicationIOThreadRuning", "Slave_IO_Running") if source else None,
        sql_running=_thread(inst, "ReplicationSQLThreadRuning", "Slave_SQL_Running") if source else None,
        seconds_behind=_nullable(inst.get("SecondsBehindMaster")) if source else None,
        last_error=str(inst.get("LastIOError") or inst.get("LastSQLError") or ""),
        replicas=[a for a in (_key_address(k) for k in inst.get("Replicas") or inst.get("SlaveHosts") or []) if a],
    )
    if inst.get("IsLastCheckValid") is False:
        facts.error = "orchestrator's last check of this instance failed"
    return Node(address, name or address, facts)


def cluster_from_instances(instances: list[dict[str, Any]], name: str | None = None,
                           names: dict[str, str] | None = None) -> Cluster:
    """Map an orchestrator cluster (list of Instance objects) into the same model discovery builds."""
    names = names or {}
    cluster = Cluster(name or str(instances[0].get("ClusterName") or "?") if instances else (name or "?"),
                      source="orchestrator")
    for inst in instances:
        node = node_from_instance(inst)
        node.name = names.get(node.address, node.address)
        node.facts.name = node.name
        cluster.nodes[node.address] = node
    assess(cluster)
    # Keep orchestrator's own diagnosis too (e.g. "replication_lag", "not_replicating").
    for inst in instances:
        addr = _key_address(inst.get("Key"))
        for p in inst.get("Problems") or []:
            listed = cluster.nodes.get(addr or "")
            if listed is not None and f"orchestrator: {p}" not in listed.problems:
                listed.problems.append(f"orchestrator: {p}")
                cluster.problems.append(f"{addr}: orchestrator: {p}")
    return cluster
