"""orchestrator client on recorded responses of the documented shapes (served by httpx.MockTransport)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest

from dbmigrate.exceptions import ConnectionFailed
from dbmigrate.topology.orchestrator import (OrchestratorClient, OrchestratorError, OrchestratorUnreachable,
                                             cluster_from_instances)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "orchestrator"


def load(name: str):
    return json.loads((FIXTURES / name).read_text())


ROUTES = {
    "/api/clusters": "clusters.json",
    "/api/cluster/db-a-1:3306": "cluster_orders.json",
    "/api/instance/db-a-2/3306": "instance_db-a-2.json",
    "/api/discover/db-a-2/3306": "discover_ok.json",
    "/api/graceful-master-takeover-auto/db-a-1:3306/db-a-2/3306": "takeover_ok.json",
    "/api/graceful-master-takeover-auto/db-a-1:3306/db-a-3/3306": "takeover_error.json",
}


def client(seen: list | None = None, status: int = 200, **kw) -> OrchestratorClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        path = request.url.path
        if path not in ROUTES:
            return httpx.Response(404, json={"Code": "ERROR", "Message": f"no route {path}"})
        return httpx.Response(status, json=load(ROUTES[path]))

    return OrchestratorClient("http://orchestrator.test:3000/", transport=httpx.MockTransport(handler), **kw)


def test_clusters_is_a_bare_list_of_names():
    assert client().clusters() == ["db-a-1:3306", "db-b-1:3306"]


def test_cluster_maps_instances_into_the_cluster_model():
    with client() as orch:
        cluster = cluster_from_instances(orch.cluster("db-a-1:3306"), name="orders",
                                         names={"db-a-2:3306": "orders-2"})
    assert cluster.source == "orchestrator"
    assert cluster.primary.address == "db-a-1:3306"
    assert sorted(n.address for n in cluster.replicas) == ["db-a-2:3306", "db-a-3:3306"]
    assert cluster.node("orders-2").address == "db-a-2:3306"
    assert cluster.node("db-a-2:3306").facts.read_only is True
    assert cluster.primary.replicas == ["db-a-2:3306", "db-a-3:3306"]
    stopped = cluster.node("db-a-3:3306")
    assert stopped.facts.sql_running == "No" and stopped.facts.seconds_behind is None
    assert any(p.startswith("replication stopped: io=Yes sql=No (Error 'Duplicate entry") for p in stopped.problems)
    assert "orchestrator: not_replicating" in stopped.problems
    assert cluster.node("db-a-2:3306").problems == []
    assert all(p.startswith("db-a-3:3306: ") for p in cluster.problems)


def test_instance_and_discover():
    with client() as orch:
        inst = orch.instance("db-a-2", 3306)
        assert inst["Key"] == {"Hostname": "db-a-2", "Port": 3306}
        assert inst["MasterKey"]["Hostname"] == "db-a-1"
        assert orch.cluster_name_of("db-a-2", 3306) == "db-a-1:3306"
        assert orch.discover("db-a-2", 3306)["ServerID"] == 2


def test_takeover_ok_returns_details():
    assert client().graceful_takeover_auto("db-a-1:3306", "db-a-2", 3306)["Key"]["Hostname"] == "db-a-2"


def test_takeover_error_raises_with_orchestrators_message():
    with pytest.raises(OrchestratorError) as e:
        client().graceful_takeover_auto("db-a-1:3306", "db-a-3", 3306)
    assert "cannot take over all of its siblings" in e.value.message
    assert "/api/graceful-master-takeover-auto/db-a-1:3306/db-a-3/3306" in e.value.message


def test_error_code_with_http_500_still_names_the_message():
    with pytest.raises(OrchestratorError, match="cannot take over"):
        client(status=500).graceful_takeover_auto("db-a-1:3306", "db-a-3", 3306)


def test_unknown_path_is_an_http_error():
    with pytest.raises(OrchestratorError, match="no route /api/cluster/nope"):
        client().cluster("nope")


def test_unreachable_url_is_a_connection_failure():
    orch = OrchestratorClient("http://127.0.0.1:9", timeout=1.0)  # discard port: nothing listens
    with pytest.raises(OrchestratorUnreachable) as e:
        orch.clusters()
    assert isinstance(e.value, ConnectionFailed)
    assert "cannot reach orchestrator http://127.0.0.1:9/api/clusters" in e.value.message
    assert e.value.hint


def test_timeout_is_reported_as_no_answer():
    def slow(request):
        raise httpx.ReadTimeout("timed out", request=request)

    orch = OrchestratorClient("http://o.test", transport=httpx.MockTransport(slow))
    with pytest.raises(OrchestratorUnreachable, match="no answer within the timeout"):
        orch.instance("db-a-2", 3306)


def test_basic_auth_from_environment_never_shows_the_password(monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_USER", "dba")
    monkeypatch.setenv("ORCHESTRATOR_PASSWORD", "s3cr3t-pw")
    seen: list[httpx.Request] = []
    orch = client(seen)
    orch.clusters()
    assert seen[0].headers["Authorization"] == "Basic " + base64.b64encode(b"dba:s3cr3t-pw").decode()
    with pytest.raises(OrchestratorError) as e:
        orch.cluster("nope")
    assert "s3cr3t-pw" not in e.value.message and "s3cr3t-pw" not in repr(orch.__dict__)


def test_unauthorised_names_the_environment_variables():
    orch = OrchestratorClient("http://o.test", transport=httpx.MockTransport(lambda r: httpx.Response(401, text="no")))
    with pytest.raises(OrchestratorError) as e:
        orch.clusters()
    assert "HTTP 401" in e.value.message and "ORCHESTRATOR_PASSWORD" in e.value.hint


def test_non_json_answer_is_explained():
    orch = OrchestratorClient("http://o.test", transport=httpx.MockTransport(
        lambda r: httpx.Response(200, text="<html>login</html>")))
    with pytest.raises(OrchestratorError, match="not JSON"):
        orch.clusters()


def test_the_takeover_step_says_who_was_promoted_and_how_long_it_took():
    from dbmigrate.topology.orchestrator import takeover_sentence

    details = client().graceful_takeover_auto("db-a-1:3306", "db-a-2", 3306)  # the canned answer
    said = takeover_sentence(details, "orders-2", "db-a-2", 3306, 2.345)
    assert said == "orchestrator promoted orders-2 (db-a-2:3306) in 2.3 s"
    assert "{" not in said and "ClusterName" not in said  # not orchestrator's whole answer
    other = takeover_sentence(details, "orders-3", "db-a-3", 3306, 1.0)
    assert other == "orchestrator promoted db-a-2:3306, not the candidate orders-3 (db-a-3:3306), in 1.0 s"
    assert takeover_sentence({}, "orders-2", "db-a-2", 3306, 0.5).endswith("its answer named no instance")
