"""What a rehearsal measured beside its run, saved as the run's evidence in the journal.

The run's journal then holds everything its report draws, so `dbmigrate runs report RUN`
gives the same report long after the sandbox is gone.
"""

from __future__ import annotations

from typing import Any, Sequence

from dbmigrate.engine.journal import Journal
from dbmigrate.report import model as m
from dbmigrate.report.series import bin_counts, per_second_latency, split_at, summarize_ms
from dbmigrate.rehearsal.verify.report import Ack, VerifyReport

READS = "point lookups by a secondary index through the router (the rehearsal's read workload)"


def write_evidence(*, acks: Sequence[Ack], verify: VerifyReport, gaps: dict[str, Any] | None = None,
                   read_samples: Sequence[tuple[float, float]] = ()) -> dict[str, Any]:
    """What every rehearsal's report carries: acknowledged writes over time (the timeline), acknowledged
    and lost writes, and the fenced window with the other gaps of the writes named by their step."""
    out: dict[str, Any] = {
        m.ACKS: {**bin_counts([a.wall for a in acks], 10.0), "source": "zero-loss verifier through the router"},
        m.VERIFIER: {"acknowledged": verify.acknowledged, "lost_total": verify.lost_total,
                     "max_gap_ms": verify.max_gap_ms, "errors": dict(verify.errors)},
    }
    if gaps is not None:
        out[m.WRITE_GAPS] = gaps
    if read_samples:
        out[m.LATENCY] = {"source": READS, "points": per_second_latency(read_samples)}
    return out


def record_evidence(run_id: str, evidence: dict[str, Any], journal_path=None) -> None:
    from dbmigrate.app.runs import resolve_journal_path

    with Journal(resolve_journal_path(journal_path)) as journal:
        for name, value in evidence.items():
            journal.record_evidence(run_id, name, value)


def promote_evidence(*, acks: Sequence[Ack], verify: VerifyReport, read_samples: Sequence[tuple[float, float]],
                     switched_at: float | None, load: dict[str, Any], cpu: dict[str, Any],
                     gaps: dict[str, Any] | None = None) -> dict[str, Any]:
    before, after = split_at(read_samples, switched_at)
    return {
        **write_evidence(acks=acks, verify=verify, gaps=gaps),
        m.LATENCY: {"source": READS, "points": per_second_latency(read_samples)},
        m.CLIENT_LATENCY: {"source": READS + ("; before and after the router flip" if switched_at else ""),
                           "split_at": switched_at, "before": summarize_ms(before), "after": summarize_ms(after)},
        m.LOAD: load,
        m.CPU: {k: v for k, v in cpu.items() if v},
    }


def record_promote_evidence(run_id: str, *, sampler: Any, journal_path=None, **kw: Any) -> None:
    """Into the run's journal: the rehearsal's own series, then the sampler's replica lag
    (its round-trip probe is coarser than the read workload, so that one stays out)."""
    from dbmigrate.app.runs import resolve_journal_path

    with Journal(resolve_journal_path(journal_path)) as journal:
        for name, value in promote_evidence(**kw).items():
            journal.record_evidence(run_id, name, value)
        sampled = sampler.evidence()
        for name in (m.LAG, m.SAMPLER):
            if sampled.get(name):
                journal.record_evidence(run_id, name, sampled[name])


CLIENTS = "clients"  # what the application's pools saw: errors per kind (classes beside), longest call


def record_client_evidence(run_id: str, clients: dict[str, Any], journal_path=None) -> None:
    """The pools' counts (rehearsal/clients) into the run's journal, beside the rest of its evidence."""
    from dbmigrate.app.runs import resolve_journal_path

    if not clients:
        return
    with Journal(resolve_journal_path(journal_path)) as journal:
        journal.record_evidence(run_id, CLIENTS, {"source": "Go database/sql-like, HikariCP-like and naive pools "
                                                            "writing through the router", **clients})


def consolidation_evidence(writers: dict[str, Any], lost: int, through: str = "the DSN file") -> dict[str, Any]:
    """The shard writers' acknowledgements (one per shard, each through the DSN file or its
    relay: `through`) as the verifier's series and summary: the same timeline and counts as a
    promote's report."""
    walls = [t for w in writers.values() for _, _, t in list(w.acks)]
    errors: dict[str, int] = {}
    for w in writers.values():
        for code, n in w.errors.items():
            errors[code] = errors.get(code, 0) + n
    return {
        m.ACKS: {**bin_counts(walls, 10.0), "source": f"{len(writers)} shard writers through {through}"},
        m.VERIFIER: {"acknowledged": len(walls), "lost_total": lost,
                     "max_gap_ms": round(max((w.longest_gap_ms() for w in writers.values()), default=0.0), 1),
                     "errors": errors},
    }


def record_consolidation_evidence(run_id: str, writers: dict[str, Any], lost: int, journal_path=None,
                                  through: str = "the DSN file") -> None:
    from dbmigrate.app.runs import resolve_journal_path

    with Journal(resolve_journal_path(journal_path)) as journal:
        for name, value in consolidation_evidence(writers, lost, through).items():
            journal.record_evidence(run_id, name, value)
