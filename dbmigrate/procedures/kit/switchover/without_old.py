"""Completing a switchover without the old primary (it died after the fence)."""

from __future__ import annotations

from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.kit.switchover.errors import describe_behind
from dbmigrate.procedures.kit.switchover.inputs import StepInputs
from dbmigrate.procedures.kit.switchover.reverse import ReverseReplication


class WithoutOldPrimary:
    """Completing a switchover whose old primary died after the fence; each replica moved is
    waited for through the reverse replication's wait."""

    def __init__(self, on: StepInputs, reverse: ReverseReplication):
        self.on, self.reverse = on, reverse
        self.topo, self.old, self.new, self.s = on.topo, on.old, on.new, on.params
        self.log, self.clock = on.log, on.clock

    def old_answers(self) -> bool:
        """Does the old primary answer within probe_timeout_s?"""
        try:
            with self.topo.bounded(self.s.probe_timeout_s, self.old):
                return self.on.insp(self.old).reachable()
        except DbmigrateError:
            return False

    def takeover_facts(self, final_pos: str) -> tuple[list[str], list[str]]:
        """(facts, problems) for promoting the candidate without the old primary: the candidate
        first applies what it received (nothing more can come), then must hold the old primary's
        final position and everything any answering replica applied or received."""
        facts, problems = [], []
        bound = self.s.catchup_timeout_s
        t0 = self.clock.monotonic()
        with self.topo.bounded(bound + self.s.probe_timeout_s, self.new):
            cand = self.on.insp(self.new)
            st = cand.replica_status()
            for target in (final_pos, st.retrieved_gtid if st else ""):
                left = bound - (self.clock.monotonic() - t0)
                if target and not cand.has_applied(target) and left > 0:
                    cand.wait_for_gtid(target, left)
            have = cand.gtid_executed()
            lacks = {k: v for k, v in cand.trx_behind(final_pos).items() if v}
        facts.append(f"{self.old}'s final position journaled at the fence: {final_pos or '(empty)'}")
        facts.append(f"{self.new} has applied {have or '(nothing)'}")
        if lacks:
            problems.append(f"{self.new} lacks {describe_behind(lacks)} of {self.old}'s final position")
        for r in self.topo.replicas:
            try:
                with self.topo.bounded(self.s.probe_timeout_s, r):
                    insp = self.on.insp(r)
                    rst = insp.replica_status()
                    mine = insp.gtid_executed()
                    received = rst.retrieved_gtid if rst else ""
            except DbmigrateError as e:
                facts.append(f"replica {r} does not answer ({e.message}): left as it is")
                continue
            extra = {k: v for pos in (mine, received) if pos for k, v in cand.flavor.behind(pos, have).items() if v}
            if extra:
                problems.append(f"replica {r} has {describe_behind(extra)} that {self.new} lacks")
            facts.append(f"replica {r} has applied {mine or '(nothing)'}" + (f", received {received}" if received else ""))
        return facts, problems

    def repoint_without_old(self) -> str:
        """Move every answering replica under the new primary (GTID positions: it sends each
        one what it lacks). A replica that cannot be moved is named and left as it is."""
        done, left = [], []
        for r in self.topo.replicas:
            try:
                with self.topo.bounded(self.s.replica_timeout_s, r):
                    if self.on.replicating_from(r, self.new):
                        continue
                    host, port = self.on.repl_addr(self.new)
                    a = self.on.apply(r)
                    a.stop_replica()
                    a.change_source(host, port, self.topo.repl)
                    a.start_replica()
                self.reverse.wait_replica_running(r, min(10.0, self.s.replica_timeout_s))
                done.append(r)
            except DbmigrateError as e:
                left.append(f"{r} ({e.message})")
                self.log(f"could not move {r} under {self.new}: {e.message}; repoint it by hand", "warning")
        said = f"repointed {', '.join(done) or 'no replica'} to {self.new}"
        return said + (f"; NOT moved: {'; '.join(left)}" if left else "")
