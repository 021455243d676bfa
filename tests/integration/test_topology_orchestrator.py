"""Against a real orchestrator (read-only calls and discover), when ORCHESTRATOR_URL names one."""

from __future__ import annotations

import os

import pytest

from dbmigrate.topology.orchestrator import OrchestratorClient, cluster_from_instances

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not os.environ.get("ORCHESTRATOR_URL"),
                                 reason="ORCHESTRATOR_URL is not set: no orchestrator to test against")]


def test_clusters_map_into_the_model_and_discover_answers_ok():
    with OrchestratorClient(os.environ["ORCHESTRATOR_URL"]) as orch:
        names = orch.clusters()
        assert names, "orchestrator knows no cluster"
        instances = orch.cluster(names[0])
        assert all({"Key", "MasterKey", "ReadOnly", "ClusterName"} <= set(i) for i in instances)
        cluster = cluster_from_instances(instances)
        assert cluster.primary is not None, cluster.problems
        host, port = cluster.primary.address.rsplit(":", 1)
        assert orch.instance(host, int(port))["ClusterName"] == names[0]
        assert orch.discover(host, int(port))["Key"]["Port"] == int(port)
