"""The run journal: a SQLite file recording every run, step, decision and statement.

It is the memory that lets `resume` continue and `rollback` undo after the
tool itself died. WAL mode and one short transaction per write keep it
consistent when the process is SIGKILLed mid-run: a step is journaled as
"started" before it touches anything, and as finished right after.

All free text is passed through redact() before it is stored (defense in
depth; the db layer redacts too).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import secrets as _random
import socket
import sqlite3
import threading

from dbmigrate.home import home
from dbmigrate.redact import redact, redact_json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from dbmigrate.engine.events import (
    Event,
    GateDecided,
    HookFinished,
    Log,
    Metric,
    RunFinished,
    StepFinished,
    StepStarted,
    utc_now_iso,
)
from dbmigrate.exceptions import UsageError

# --------------------------------------------------------------------------- paths and ids


def default_journal_path() -> Path:
    """$DBMIGRATE_JOURNAL, else $DBMIGRATE_HOME/journal.sqlite, else ~/.dbmigrate/journal.sqlite."""
    explicit = os.environ.get("DBMIGRATE_JOURNAL")
    if explicit:
        return Path(explicit).expanduser()
    return home() / "journal.sqlite"


def new_run_id(now: datetime | None = None) -> str:
    """Short, sortable and unique enough: 20261122-180501-a1b2 (UTC)."""
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{_random.token_hex(2)}"


def current_holder() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


# --------------------------------------------------------------------------- schema

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, procedure TEXT NOT NULL, cluster TEXT NOT NULL,
    playbook TEXT, playbook_sha TEXT, params TEXT NOT NULL DEFAULT '{}',
    dry_run INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL, summary TEXT,
    started_at TEXT NOT NULL, finished_at TEXT, pid INTEGER, holder TEXT);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id),
    step_index INTEGER NOT NULL, phase TEXT NOT NULL, name TEXT NOT NULL,
    action TEXT NOT NULL DEFAULT 'run', status TEXT NOT NULL, sentence TEXT, error TEXT,
    started_at TEXT, finished_at TEXT, duration_ms REAL);
CREATE INDEX IF NOT EXISTS steps_run ON steps(run_id, id);
CREATE TABLE IF NOT EXISTS gates (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, phase TEXT NOT NULL, name TEXT NOT NULL,
    kind TEXT NOT NULL, ok INTEGER NOT NULL, reason TEXT, details TEXT, decided_by TEXT,
    decided_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hooks (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, hook TEXT NOT NULL, phase TEXT,
    command TEXT NOT NULL, status TEXT NOT NULL, exit_code INTEGER, duration_ms REAL,
    stdout_tail TEXT, stderr_tail TEXT, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS statements (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step_id INTEGER, server TEXT,
    sql TEXT NOT NULL, duration_ms REAL, dry_run INTEGER NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, name TEXT NOT NULL, value REAL,
    unit TEXT, labels TEXT, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS logs (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, level TEXT NOT NULL, message TEXT,
    at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS state (
    run_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, updated_at TEXT NOT NULL,
    PRIMARY KEY (run_id, key));
CREATE TABLE IF NOT EXISTS locks (
    id INTEGER PRIMARY KEY, cluster TEXT NOT NULL, run_id TEXT NOT NULL, holder TEXT,
    pid INTEGER, since TEXT NOT NULL, status TEXT NOT NULL, released_at TEXT, note TEXT);
CREATE INDEX IF NOT EXISTS locks_cluster ON locks(cluster, status);
CREATE TABLE IF NOT EXISTS intents (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, cluster TEXT NOT NULL, server TEXT NOT NULL,
    address TEXT NOT NULL, session_id INTEGER, user TEXT, kind TEXT, generation INTEGER,
    statement TEXT NOT NULL, sent_at REAL NOT NULL, outcome TEXT, outcome_at TEXT);
CREATE INDEX IF NOT EXISTS intents_open ON intents(cluster, outcome);
CREATE TABLE IF NOT EXISTS evidence (
    run_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, at TEXT NOT NULL,
    PRIMARY KEY (run_id, name));
"""

# Step statuses that count as "this step's effect is in place".
FINISHED_OK = ("done", "skipped")



@dataclass(frozen=True)
class Run:
    """One run as journaled: what resume, rollback and the refusals decide from."""

    id: str
    procedure: str
    cluster: str
    playbook: str | None  # the playbook's resolved path; None for runs started without one
    playbook_sha: str | None
    params: dict[str, Any]
    dry_run: bool
    status: str  # running, done, failed, rolled_back, rollback_failed, refused, declined, ...
    summary: str | None
    started_at: str
    finished_at: str | None
    pid: int | None  # the process that last drove it
    holder: str | None  # user@host of that process

    @property
    def host(self) -> str:
        return (self.holder or "").rpartition("@")[2]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

class Journal:
    """One SQLite journal. Thread-safe: a TUI worker may write while the UI reads."""

    def __init__(self, path: str | os.PathLike[str], synchronous: str = "NORMAL") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # Autocommit; each write below is its own short transaction.
        self._db = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        # The step rows open now, by (run, phase, name, action): a fleet step's sub-steps run in
        # threads of their own while their parent is open. Statements are attributed to the newest
        # step opened by the thread that sends them (else to the run's newest).
        self._open_steps: dict[tuple[str, str, str, str], int] = {}
        self._thread_steps: dict[tuple[str, int], list[int]] = {}
        self._newest_step: dict[str, int] = {}
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL survives a crash of the tool (SIGKILL) without an fsync per
            # write; those fsyncs sat inside the fenced window, between cutover steps.
            # (`synchronous` is for bench/intent_cost.py's comparison: FULL fsyncs every commit.)
            self._db.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'FULL' else 'NORMAL'}")
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ low level

    def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        with self._lock:
            cur = self._db.execute(sql, tuple(params))
            return int(cur.lastrowid or 0)

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._db.execute(sql, tuple(params)).fetchall()]

    # ------------------------------------------------------------------ runs

    def create_run(
        self,
        run_id: str,
        *,
        procedure: str,
        cluster: str,
        params: dict[str, Any] | None = None,
        playbook: str | None = None,
        playbook_sha: str | None = None,
        dry_run: bool = False,
    ) -> None:
        self._write(
            "INSERT INTO runs (id, procedure, cluster, playbook, playbook_sha, params, dry_run, status,"
            " started_at, pid, holder) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, procedure, cluster, playbook, playbook_sha,
             json.dumps(redact_json(params or {}), default=str), int(dry_run), "running",
             utc_now_iso(), os.getpid(), current_holder()),
        )

    def mark_running(self, run_id: str) -> None:
        """A resumed or rolled-back run is owned by this process now."""
        self._write(
            "UPDATE runs SET status='running', finished_at=NULL, pid=?, holder=? WHERE id=?",
            (os.getpid(), current_holder(), run_id),
        )

    def finish_run(self, run_id: str, status: str, summary: str) -> None:
        self._write(
            "UPDATE runs SET status=?, summary=?, finished_at=? WHERE id=?",
            (status, redact(summary), utc_now_iso(), run_id),
        )

    def forget_run(self, run_id: str) -> None:
        """Remove a run that never started (a dry run refused while opening its resources):
        nothing was done, so there is nothing to keep a record of."""
        with self._lock:
            for table in ("steps", "gates", "hooks", "statements", "metrics", "logs", "state", "evidence"):
                self._write(f"DELETE FROM {table} WHERE run_id=?", (run_id,))
            self._write("DELETE FROM runs WHERE id=?", (run_id,))

    def get_run(self, run_id: str) -> Run | None:
        rows = self._rows("SELECT * FROM runs WHERE id=?", (run_id,))
        if not rows:
            return None
        row = rows[0]
        return Run(id=row["id"], procedure=row["procedure"], cluster=row["cluster"], playbook=row["playbook"],
                   playbook_sha=row["playbook_sha"], params=json.loads(row["params"] or "{}"),
                   dry_run=bool(row["dry_run"]), status=row["status"], summary=row["summary"],
                   started_at=row["started_at"], finished_at=row["finished_at"], pid=row["pid"],
                   holder=row["holder"])

    def resolve_run_id(self, ref: str) -> str:
        """Accept a full id, a unique prefix, or 'last'."""
        if ref == "last":
            rows = self._rows("SELECT id FROM runs ORDER BY started_at DESC, id DESC LIMIT 1")
        else:
            rows = self._rows("SELECT id FROM runs WHERE id LIKE ? ORDER BY id", (ref.replace("%", "") + "%",))
        if len(rows) == 1:
            return str(rows[0]["id"])
        if not rows:
            raise UsageError(
                f"no run {ref!r} in journal {self.path}",
                hint="list runs with: dbmigrate runs ls (use --journal if the run used another journal)",
            )
        ids = ", ".join(r["id"] for r in rows[:5])
        raise UsageError(f"run {ref!r} is ambiguous: {ids}", hint="give more characters of the run id")

    REHEARSAL_KEY = "rehearsal"

    def mark_rehearsal(self, run_id: str) -> None:
        """A rehearsal's run: `last` outside a rehearsal never means it."""
        self.set_state(run_id, self.REHEARSAL_KEY, True)

    def newest_runs(self, cluster: str | None = None, *, rehearsals: bool = False) -> list[dict[str, Any]]:
        """The newest run of each cluster (or of the one named), newest first; rehearsal runs only
        when asked for."""
        where, args = [], []
        if cluster is not None:
            where.append("cluster=?")
            args.append(cluster)
        if not rehearsals:
            where.append("id NOT IN (SELECT run_id FROM state WHERE key=?)")
            args.append(self.REHEARSAL_KEY)
        rows = self._rows("SELECT id, procedure, cluster, status, dry_run, started_at FROM runs"
                          + (" WHERE " + " AND ".join(where) if where else "")
                          + " ORDER BY started_at DESC, id DESC", args)
        newest: dict[str, dict[str, Any]] = {}
        for row in rows:
            newest.setdefault(row["cluster"], row)
        return list(newest.values())

    def list_runs(self, limit: int = 50) -> list[dict[str, Any]]:
        runs = self._rows("SELECT * FROM runs ORDER BY started_at DESC, id DESC LIMIT ?", (limit,))
        for run in runs:
            run["params"] = json.loads(run["params"] or "{}")
            run["dry_run"] = bool(run["dry_run"])
        return runs

    def run_detail(self, run_id: str) -> dict[str, Any]:
        """Everything about one run, JSON-ready (what `runs show --json` prints)."""
        run = self.get_run(run_id)
        if run is None:
            raise UsageError(f"no run {run_id!r} in journal {self.path}")
        gates = self._rows("SELECT * FROM gates WHERE run_id=? ORDER BY id", (run_id,))
        for gate in gates:
            gate["ok"] = bool(gate["ok"])
            gate["details"] = json.loads(gate["details"] or "{}")
        statements = self._rows("SELECT * FROM statements WHERE run_id=? ORDER BY id", (run_id,))
        for statement in statements:
            statement["dry_run"] = bool(statement["dry_run"])
        metrics = self._rows("SELECT * FROM metrics WHERE run_id=? ORDER BY id", (run_id,))
        for metric in metrics:
            metric["labels"] = json.loads(metric["labels"] or "{}")
        return {
            **run.to_dict(),
            "steps": self.step_rows(run_id),
            "gates": gates,
            "hooks": self._rows("SELECT * FROM hooks WHERE run_id=? ORDER BY id", (run_id,)),
            "statements": statements,
            "metrics": metrics,
            "logs": self._rows("SELECT * FROM logs WHERE run_id=? ORDER BY id", (run_id,)),
            "state": self.all_state(run_id),
            "not_undone": self.not_undone(run_id),
        }

    # ------------------------------------------------------------------ steps

    def step_started(self, run_id: str, index: int, phase: str, name: str, action: str = "run") -> int:
        row = self._write(
            "INSERT INTO steps (run_id, step_index, phase, name, action, status, started_at)"
            " VALUES (?,?,?,?,?,?,?)",
            (run_id, index, phase, name, action, "started", utc_now_iso()),
        )
        with self._lock:
            self._open_steps[(run_id, phase, name, action)] = row
            self._thread_steps.setdefault((run_id, threading.get_ident()), []).append(row)
            self._newest_step[run_id] = row
        return row

    def _close_step(self, run_id: str, phase: str, name: str, action: str) -> int | None:
        with self._lock:
            row = self._open_steps.pop((run_id, phase, name, action), None)
            if row is None:
                return None
            for key, rows in list(self._thread_steps.items()):
                if key[0] == run_id and row in rows:
                    rows.remove(row)
                    if not rows:
                        del self._thread_steps[key]
            if self._newest_step.get(run_id) == row:
                del self._newest_step[run_id]
            return row

    def _current_step(self, run_id: str) -> int | None:
        """The step a statement sent now belongs to: this thread's newest open step, else the run's."""
        with self._lock:
            rows = self._thread_steps.get((run_id, threading.get_ident()))
            if rows:
                return rows[-1]
            return self._newest_step.get(run_id)

    def step_finished(
        self,
        run_id: str,
        index: int,
        phase: str,
        name: str,
        *,
        status: str,
        sentence: str = "",
        error: str | None = None,
        duration_ms: float = 0.0,
        action: str = "run",
    ) -> None:
        row = self._close_step(run_id, phase, name, action)
        now = utc_now_iso()
        if row is not None:
            self._write(
                "UPDATE steps SET status=?, sentence=?, error=?, finished_at=?, duration_ms=? WHERE id=?",
                (status, redact(sentence), redact(error), now, duration_ms, row),
            )
        else:  # skipped and dry-run steps finish without having started anything
            self._write(
                "INSERT INTO steps (run_id, step_index, phase, name, action, status, sentence, error,"
                " started_at, finished_at, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, index, phase, name, action, status, redact(sentence), redact(error), now, now,
                 duration_ms),
            )

    def step_rows(self, run_id: str) -> list[dict[str, Any]]:
        return self._rows(
            "SELECT step_index AS 'index', phase, name, action, status, sentence, error,"
            " started_at, finished_at, duration_ms FROM steps WHERE run_id=? ORDER BY id",
            (run_id,),
        )

    def last_step_status(self, run_id: str) -> dict[tuple[str, str], str]:
        """Latest status of each step's forward execution, keyed by (phase, name)."""
        status: dict[tuple[str, str], str] = {}
        for row in self.step_rows(run_id):
            if row["action"] == "run":
                status[(row["phase"], row["name"])] = row["status"]
        return status

    def completed_steps(self, run_id: str) -> list[dict[str, Any]]:
        """Steps this run actually did (status done) and that are not undone yet, in completion order."""
        done: dict[tuple[str, str], dict[str, Any]] = {}
        for row in self.step_rows(run_id):
            key = (row["phase"], row["name"])
            if row["action"] == "run" and row["status"] == "done":
                done.pop(key, None)  # re-done after an earlier undo: counts at its latest position
                done[key] = row
            elif row["action"] == "undo" and row["status"] in ("undone", "skipped"):
                done.pop(key, None)
        return list(done.values())

    def not_undone(self, run_id: str) -> list[dict[str, Any]]:
        """Steps whose latest undo left their change in place, with what they left: the statements
        their forward execution sent (server, sql), newest step first."""
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        forward: dict[tuple[str, str], int] = {}
        for row in self._rows("SELECT id, phase, name, action, status, sentence FROM steps WHERE run_id=? "
                              "ORDER BY id", (run_id,)):
            key = (row["phase"], row["name"])
            if row["action"] == "run" and row["status"] in ("done", "failed", "interrupted"):
                forward[key] = row["id"]
            elif row["action"] == "undo":
                latest[key] = row
        out = []
        for key, row in reversed(list(latest.items())):
            if row["status"] != "not_undone":
                continue
            left = self._rows("SELECT server, sql FROM statements WHERE run_id=? AND step_id=? AND dry_run=0 "
                              "ORDER BY id", (run_id, forward.get(key, -1)))
            out.append({"phase": key[0], "step": key[1], "sentence": row["sentence"], "left": left})
        return out

    def unfinished_steps(self, run_id: str) -> list[dict[str, Any]]:
        """Steps whose latest forward execution started but did not end done (killed, failed,
        interrupted) and that are not undone since: their effect may be partly in place."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for row in self.step_rows(run_id):
            key = (row["phase"], row["name"])
            if row["action"] == "run":
                if row["status"] in ("started", "failed", "interrupted"):
                    out[key] = row
                else:
                    out.pop(key, None)
            elif row["action"] == "undo" and row["status"] in ("undone", "skipped"):
                out.pop(key, None)
        return list(out.values())

    # ------------------------------------------------------------------ gates and hooks

    def record_gate(self, event: GateDecided) -> None:
        self._write(
            "INSERT INTO gates (run_id, phase, name, kind, ok, reason, details, decided_by, decided_at)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            (event.run_id, event.phase, event.gate, event.kind, int(event.ok), redact(event.reason),
             json.dumps(redact_json(event.details), default=str), event.by, event.at),
        )

    def passed_gates(self, run_id: str) -> set[tuple[str, str]]:
        rows = self._rows("SELECT phase, name FROM gates WHERE run_id=? AND ok=1", (run_id,))
        return {(r["phase"], r["name"]) for r in rows}

    def record_hook(self, event: HookFinished) -> None:
        self._write(
            "INSERT INTO hooks (run_id, hook, phase, command, status, exit_code, duration_ms,"
            " stdout_tail, stderr_tail, at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (event.run_id, event.hook, event.phase, redact(event.command), event.status, event.exit_code,
             event.duration_ms, redact(event.stdout_tail), redact(event.stderr_tail), event.at),
        )

    def succeeded_hooks(self, run_id: str) -> set[tuple[str, str | None, str]]:
        rows = self._rows("SELECT hook, phase, command FROM hooks WHERE run_id=? AND status='ok'", (run_id,))
        return {(r["hook"], r["phase"], r["command"]) for r in rows}

    # ------------------------------------------------------------------ statements, metrics, logs

    def record_statement(
        self, run_id: str, server: str, sql: str, duration_ms: float | None, dry_run: bool
    ) -> None:
        self._write(
            "INSERT INTO statements (run_id, step_id, server, sql, duration_ms, dry_run, at)"
            " VALUES (?,?,?,?,?,?,?)",
            (run_id, self._current_step(run_id), server, redact(sql), duration_ms, int(dry_run),
             utc_now_iso()),
        )

    def record_metric(self, event: Metric) -> None:
        self._write(
            "INSERT INTO metrics (run_id, name, value, unit, labels, at) VALUES (?,?,?,?,?,?)",
            (event.run_id, event.name, event.value, event.unit, json.dumps(event.labels), event.at),
        )

    def metric_rows(self, run_id: str, name: str) -> list[dict[str, Any]]:
        """One metric's rows of a run, oldest first, labels decoded."""
        rows = self._rows("SELECT * FROM metrics WHERE run_id=? AND name=? ORDER BY id", (run_id, name))
        for row in rows:
            row["labels"] = json.loads(row["labels"] or "{}")
        return rows

    def record_log(self, event: Log) -> None:
        self._write(
            "INSERT INTO logs (run_id, level, message, at) VALUES (?,?,?,?)",
            (event.run_id, event.level, redact(event.message), event.at),
        )

    # ------------------------------------------------------------------ per-run state

    # -- write-ahead intents (db/intent.py): a change journaled before it is sent ----------
    def record_intent(self, run_id: str, cluster: str, intent: dict[str, Any]) -> int:
        return self._write(
            "INSERT INTO intents (run_id, cluster, server, address, session_id, user, kind, generation, statement, "
            "sent_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (run_id, cluster, intent["server"], intent["address"], intent.get("session_id"), intent.get("user"),
             intent.get("kind"), intent.get("generation"), redact(str(intent["statement"])), intent["at"]))

    def intent_outcome(self, intent_id: int, outcome: str) -> None:
        self._write("UPDATE intents SET outcome=?, outcome_at=? WHERE id=?", (redact(outcome), utc_now_iso(), intent_id))

    def open_intents(self, cluster: str) -> list[dict[str, Any]]:
        """Changes of this cluster's runs that were sent and never answered (in flight when their
        process died, or given up on): each may still land until its session is ended."""
        return self._rows("SELECT * FROM intents WHERE cluster=? AND outcome IS NULL ORDER BY id", (cluster,))

    def get_state(self, run_id: str, key: str, default: Any = None) -> Any:
        rows = self._rows("SELECT value FROM state WHERE run_id=? AND key=?", (run_id, key))
        return json.loads(rows[0]["value"]) if rows else default

    def set_state(self, run_id: str, key: str, value: Any) -> None:
        self._write(
            "INSERT INTO state (run_id, key, value, updated_at) VALUES (?,?,?,?)"
            " ON CONFLICT(run_id, key) DO UPDATE SET value=excluded.value, updated_at=excluded.updated_at",
            (run_id, key, json.dumps(value), utc_now_iso()),
        )

    def all_state(self, run_id: str) -> dict[str, Any]:
        rows = self._rows("SELECT key, value FROM state WHERE run_id=? ORDER BY key", (run_id,))
        return {r["key"]: json.loads(r["value"]) for r in rows}

    # ------------------------------------------------------------------ evidence for reports

    def record_evidence(self, run_id: str, name: str, value: Any) -> None:
        """A measured series or figure kept for the run's report (acknowledged writes per 10 ms,
        lag and latency samples, load before/after); one JSON document per name, replaced when
        recorded again. Kept apart from `state` so that resume and rollback never read it."""
        self._write(
            "INSERT INTO evidence (run_id, name, value, at) VALUES (?,?,?,?)"
            " ON CONFLICT(run_id, name) DO UPDATE SET value=excluded.value, at=excluded.at",
            (run_id, name, json.dumps(redact_json(value), default=str), utc_now_iso()),
        )

    def evidence(self, run_id: str) -> dict[str, Any]:
        rows = self._rows("SELECT name, value FROM evidence WHERE run_id=? ORDER BY name", (run_id,))
        return {r["name"]: json.loads(r["value"]) for r in rows}

    # ------------------------------------------------------------------ cluster lock entries

    def active_lock(self, cluster: str) -> dict[str, Any] | None:
        rows = self._rows(
            "SELECT * FROM locks WHERE cluster=? AND status='held' ORDER BY id DESC LIMIT 1", (cluster,)
        )
        return rows[0] if rows else None

    def take_lock(self, cluster: str, run_id: str) -> None:
        self._write(
            "INSERT INTO locks (cluster, run_id, holder, pid, since, status) VALUES (?,?,?,?,?, 'held')",
            (cluster, run_id, current_holder(), os.getpid(), utc_now_iso()),
        )

    def mark_lock_stale(self, lock_id: int, note: str) -> None:
        self._write(
            "UPDATE locks SET status='stale', released_at=?, note=? WHERE id=?", (utc_now_iso(), note, lock_id)
        )

    def release_lock(self, cluster: str, run_id: str) -> None:
        self._write(
            "UPDATE locks SET status='released', released_at=? WHERE cluster=? AND run_id=? AND status='held'",
            (utc_now_iso(), cluster, run_id),
        )

    # ------------------------------------------------------------------ event subscriber

    def record(self, event: Event) -> None:
        """Bus subscriber: persist the events that make up the audit trail."""
        if isinstance(event, StepStarted):
            self.step_started(event.run_id, event.index, event.phase, event.name, event.action)
        elif isinstance(event, StepFinished):
            self.step_finished(
                event.run_id, event.index, event.phase, event.name, status=event.status,
                sentence=event.sentence, error=event.error, duration_ms=event.duration_ms, action=event.action,
            )
        elif isinstance(event, GateDecided):
            self.record_gate(event)
        elif isinstance(event, HookFinished):
            self.record_hook(event)
        elif isinstance(event, Metric):
            self.record_metric(event)
        elif isinstance(event, Log):
            self.record_log(event)
        elif isinstance(event, RunFinished):
            self.finish_run(event.run_id, event.status, event.summary)


def foreign_sqlite_tables(path: str | os.PathLike[str]) -> set[str] | None:
    """The tables of an existing SQLite file when it is not a journal (has tables, none
    of them `runs`), else None. Read-only: nothing is created in someone else's file."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    return tables if tables and "runs" not in tables else None
