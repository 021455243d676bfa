"""The fault matrix: cutovers on real sandboxes under load, a fault injected at every step
boundary and inside the cutover's steps, one operator command at most, then the verdict
(lost writes, two writable servers, time without a writer, final health)."""

from dbmigrate.rehearsal.faultmatrix.harness import FaultCluster, Result, run_scenario
from dbmigrate.rehearsal.faultmatrix.scenarios import Scenario, all_scenarios, select

__all__ = ["FaultCluster", "Result", "run_scenario", "Scenario", "all_scenarios", "select"]
