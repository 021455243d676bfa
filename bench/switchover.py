#!/usr/bin/env python3
"""Switchover benchmark: what an application behind HAProxy sees during promotions.

The zero-loss verifier writes through HAProxy from a process of its own, as the
application does (one acknowledged id every ~1 ms), while
sysbench loads the primary, and N promotions go back and forth. Per round:
- the writer's gap that overlaps the cutover: from the moment the candidate converged
  (just before the fence) to the router flip and the candidate's open, not the whole run.
  A fence attempt given up counts from its convergence to its giving up; the pause after it,
  writes flowing and nothing fenced, does not (the gap counting it too is reported beside);
- the wait for convergence, outside the fenced window;
- the candidate's lag at the fence, as journaled (transactions behind);
- errors the writer saw (read-only refusals, lost connections);
- what three application pools writing through the router saw (rehearsal/clients: a Go
  database/sql-like, a HikariCP-like and a naive pool): errors per kind by class (1290, 2013,
  2006, gone-on-reuse, other) and the longest call any of them waited (the client stall).
Then p50 / p95 / max across the rounds that switched (and per candidate), the lost writes at
the end, and the writer's gaps while no cutover ran, per primary: what the servers and the
machine alone cost the application, the reference for the gaps at the cutovers.

The tool's cost outside the fenced window: after each round the same load runs with no tool,
as long as the run took (a sysbench of its own: the round's dies at the flip); the writer's gaps
during the runs outside their windows (also split before the first fence / after the last
window) are set beside its gaps in those spans, p99 and max, with their ratios, and the longest
gap over each whole call (exec to exit) with where it lay. --tool-cpus 1 runs the tool on core 1
and everything else the bench starts on the others: the tool as from a host of its own.

--lagging gives the candidate a quarter of the buffer pool and single-threaded apply under
a heavier load (8 sysbench threads, bigger tables), so that it lags by design: the run
either waits for it outside the fenced window or refuses to fence, and says why. The
rounds back run with that slower server as the primary.

Where ORCHESTRATOR_URL is set, rounds alternate dbmigrate and orchestrator
(`via: orchestrator`) on the same sandbox and load, and the p50 ratio is printed.

--alternate-with TREE (a checkout of another commit) alternates this checkout's tool with TREE's
on the same sandbox, load, pools and harness, two rounds (there and back) each: a before/after
of a change in one run, each result labelled with its commit.

Targets on a quiet machine: p50 <= 10 ms, max <= 60 ms, 0 lost.

    python bench/switchover.py [--rounds 10] [--json] [--lagging] [--rate TPS] [--candidate-buffer-pool-mb MB]
                               [--tool-cpus LIST] [--in-process] [--hold-new-connections [on|off|both]]
                               [--alternate-with TREE [--alternate-router haproxy|relay]] [--router haproxy|relay]

--router relay puts the relay (relay/, docs/internals/relay.md) in front of the cluster as its
router (HAProxy still starts, unused for writes): the writer, sysbench and the pools write through
the relay, and promote drives it (with --hold-new-connections: hold, wait, fence, open, move).

--alternate-router haproxy with --router relay: TREE's tool (a commit that predates the relay)
drives HAProxy while this checkout's drives the relay, in the same run: each round's writer, load
and pools write through that round's router (one zero-loss writer per router, pools started for
each round), and after each round the router it did not drive is pointed at the new writer,
outside every measured span.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from rich.console import Console

from dbmigrate.app.runs import start_run
from dbmigrate.cli.render import ConsoleRenderer
from dbmigrate.config import load_inventory
from dbmigrate.engine.events import Log, StepFinished, StepStarted
from dbmigrate.app.runs import resolve_journal_path
from dbmigrate.engine.journal import Journal
from dbmigrate.rehearsal.clients import ClientProcess, FixedAddress, console_line, create_table
from dbmigrate.rehearsal.clients.pools import KINDS
from dbmigrate.rehearsal.sandbox import haproxy
from dbmigrate.rehearsal.sandbox import relay as sandbox_relay
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.rehearsal.sysbench import Sysbench
from dbmigrate.routing import router_for
from writer_process import WriterProcess

TARGET_P50_MS, TARGET_MAX_MS = 10, 60
CLIENT_KINDS = tuple(KINDS)
DEVNULL = open(os.devnull, "w")
# An application that writes every ~1 ms and, refused (read-only, connection cut), tries
# again after half of that, on a new connection.
WRITER_INTERVAL_S, WRITER_RETRY_PAUSE_S = 0.001, 0.0005

# A candidate that keeps up less well: less cache, one applier thread, under a heavier
# load (8 threads, bigger tables): unthrottled, it is waited for before most fences.
LAGGING_CANDIDATE = {"slave_parallel_threads": "0"}
# A quarter of the others' buffer pool. Not 16 MB: there MariaDB 10.11 stalls every commit for
# 0.4-0.75 s about every 2 s under this load, a server broken on its own (no write gets through,
# with or without a cutover), not one that lags; at 32 and 64 MB, over the same 35 s, no write
# waited past 50 ms. `--candidate-buffer-pool-mb 16` shows it (the gaps with no cutover running).
LAGGING_BUFFER_POOL_MB, BUFFER_POOL_MB = 32, 128


def gap_in(acks, start: float, end: float) -> float:
    """Longest gap between consecutive acks that overlaps [start, end] (monotonic s) in ms."""
    best = 0.0
    for prev, cur in zip(acks, acks[1:]):
        if cur.mono >= start and prev.mono <= end:
            best = max(best, (cur.mono - prev.mono) * 1000)
    return best


def longest_gap_where(acks, windows: list[tuple[float, float]], errors: list[tuple[float, str]],
                      events: list[tuple[float, str]]) -> dict | None:
    """Where the round's longest gap lay, in ms from the first window's start: its two acks (and
    the servers that gave them), the windows, and the run's events and the writer's errors in it."""
    if not windows:
        return None
    ref = windows[0][0]
    best = None
    for prev, cur in zip(acks, acks[1:]):
        if any(cur.mono >= s and prev.mono <= e for s, e in windows):
            if best is None or cur.mono - prev.mono > best[1].mono - best[0].mono:
                best = (prev, cur)
    if best is None:
        return None
    prev, cur = best
    ms = lambda t: round((t - ref) * 1000, 1)  # noqa: E731
    return {"from_ms": ms(prev.mono), "to_ms": ms(cur.mono), "servers": [prev.server_id, cur.server_id],
            "windows_ms": [[ms(s), ms(e)] for s, e in windows],
            "writer_errors_ms": [[ms(t), kind] for t, kind in errors if prev.mono <= t <= cur.mono],
            # Steps of any phase, convergences and attempts given up in the gap (or just around it).
            "events_in_gap_ms": [[ms(t), what] for t, what in events if prev.mono - 0.01 <= t <= cur.mono + 0.01]}


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    if not v:
        return 0.0
    k = max(0, min(len(v) - 1, round(p / 100 * (len(v) - 1))))
    return v[k]


@dataclass
class Moments:
    """When (monotonic) the cutover's parts happened, from the run's events.

    A fence attempt that gives up (blocked, or its candidate not caught up within the budget)
    is followed by a pause in which writes flow, the old primary writable and nothing fenced,
    then by a new convergence and attempt. The windows that count are the attempts: each from
    its convergence (the fence follows at once) to its giving up, and the last one from its
    convergence to the flip and the open; not the pauses between them."""

    cutover_started: float | None = None
    converged: float | None = None  # the first convergence
    attempt_started: float | None = None  # the latest convergence: its fence follows at once
    given_up: list[tuple[float, float]] = field(default_factory=list)  # attempts given up: (start, end)
    flipped: float | None = None
    opened: float | None = None
    cutover_finished: float | None = None
    marks: dict[str, float] = field(default_factory=dict)
    retries: list[str] = field(default_factory=list)  # why a fence attempt was given up
    watchdog: list[str] = field(default_factory=list)  # the fence watchdog's timeline, per attempt it gave up
    # Every step's start and end (any phase), each convergence and each attempt given up.
    events: list[tuple[float, str]] = field(default_factory=list)

    # Where the run is another process, an event's time is its own `at` (wall, ms), carried over
    # to this machine's monotonic clock (the writer's acks are on it); in process, now.
    time_of: Any = None

    def __call__(self, event) -> None:
        now = self.time_of(event) if self.time_of else time.monotonic()
        if isinstance(event, (StepStarted, StepFinished)) and event.action == "run":
            self.events.append((now, f"{event.phase}: {event.name} "
                                     f"{'started' if isinstance(event, StepStarted) else event.status}"))
        if isinstance(event, Log) and event.message.startswith("the fence watchdog on "):
            self.watchdog.append(event.message.split(": ", 1)[-1])
        if isinstance(event, Log) and "; trying again in " in event.message:
            self.retries.append(event.message.split("; trying again in ")[0])
            self.events.append((now, f"gave up attempt {len(self.retries)}"))
            if self.attempt_started is not None:
                self.given_up.append((self.attempt_started, now))
                self.attempt_started = None
        if isinstance(event, StepStarted) and event.phase == "cutover" and event.action == "run":
            self.cutover_started = self.cutover_started or now
        elif isinstance(event, Log) and " transaction(s) behind " in event.message and "(limit " in event.message:
            self.converged = self.converged or now
            self.attempt_started = now
            self.events.append((now, f"converged for attempt {len(self.retries) + 1}"))
        elif isinstance(event, StepFinished) and event.phase == "cutover" and event.action == "run":
            self.cutover_finished = now
            self.marks[event.name] = now
            if event.name == "switch router" and event.status == "done":
                self.flipped = now
            elif event.name.startswith("open ") and event.status == "done":
                self.opened = now

    @property
    def writable_again(self) -> float | None:
        """When the application could write again: the router sends it to the candidate and
        the candidate is open, whichever came last."""
        return max(self.flipped, self.opened) if self.flipped and self.opened else None

    def inside(self) -> dict[str, float]:
        """Each step that ended inside the last window: ms from its fence to the step's end
        (where the time goes)."""
        end, start = self.writable_again, self.attempt_started
        if start is None or end is None:
            return {}
        return {name: round((t - start) * 1000, 1) for name, t in self.marks.items() if start <= t <= end}

    def window(self) -> tuple[float, float] | None:
        """The last attempt: from its fence (just after convergence) to the flip and the open;
        the whole cutover phase otherwise."""
        start = self.attempt_started or self.converged or self.cutover_started
        end = self.writable_again or self.cutover_finished
        return (start, end) if start is not None and end is not None else None

    def windows(self) -> list[tuple[float, float]]:
        """Every window in which writes may have been held back: the given-up attempts and the last."""
        last = self.window()
        return self.given_up + ([last] if last else [])

    def from_first_convergence(self) -> tuple[float, float] | None:
        """The whole span, pauses between attempts included (reported beside, for comparison)."""
        start = self.converged or self.cutover_started
        end = self.writable_again or self.cutover_finished
        return (start, end) if start is not None and end is not None else None


# How long after the fence the candidate may take to apply the final position before the
# attempt is given up (unfenced, tried again): a guard against a candidate that stalls.
FENCED_CATCHUP_BUDGET_S = 0.03
def playbook(state, name: str, candidate: str, via: str, budget_s: float | None = FENCED_CATCHUP_BUDGET_S,
             extra: dict[str, Any] | None = None, label: str = "", inventory: Path | None = None) -> Path:
    """The round's playbook; `extra`: the tool's own params (hold_new_connections); `inventory`:
    the one naming the router the tool drives (default: the sandbox's)."""
    doc = {"procedure": "promote", "inventory": str(inventory or state.inventory_file), "cluster": name,
           "params": {"candidate": candidate, "via": via, "catchup_timeout_s": 5, "fence_drain_timeout_s": 0.2,
                      "max_lag_ms": 60000, "lag_wait_s": 5, "converge_timeout_s": 10,
                      # A fence stuck behind application transactions waiting on each other (about 3 in
                      # 100 under this load) gives up after 30 ms and is tried again, writes flowing between;
                      # so does one whose candidate has not applied the final position 30 ms after it.
                      **({"fence_block_s": 0.03, "fence_attempts": 5, "fence_retry_pause_s": 0.2,
                          **({"fenced_catchup_budget_s": budget_s} if budget_s else {}), **(extra or {})}
                         if via == "dbmigrate" else {})}}
    path = state.path / f"bench-{candidate}-{label or via}.yaml".replace("@", "-").replace("+", "-")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def dbmigrate_cmd() -> list[str]:
    """`dbmigrate` as `python -m dbmigrate` with this interpreter: the code under test's own entry
    point, whatever an installed script's interpreter line or entry point says (an editable install
    made elsewhere, or from another commit)."""
    return [sys.executable, "-m", "dbmigrate"]


def tool_env(tree: Path | None = None) -> dict[str, str]:
    """As installed: compiled modules cached (in the bench's home), not compiled at every start.
    With `tree` (--alternate-with), that checkout's package comes first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(os.environ["DBMIGRATE_HOME"]) / "pycache")
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    return env


def commit_of(tree: Path) -> str:
    """The checkout's commit, short, with "+changes" when its tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short=7", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


@dataclass(frozen=True)
class Tool:
    """Who runs a round: this checkout's dbmigrate, another checkout's (--alternate-with), or
    orchestrator. `via` is the playbook's; `label` names the tool in the results."""
    label: str
    via: str = "dbmigrate"
    tree: Path | None = None
    commit: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    router: str = "haproxy"  # the router kind its rounds drive, and the clients write through


HOLD = {"hold_new_connections": True}


def tools_for(orchestrator_url: str | None, alternate_with: Path | None, hold: str = "off",
              router: str = "haproxy", alternate_router: str | None = None) -> list[Tool]:
    """hold: "on" gives this checkout's tool hold_new_connections, "both" runs it with and without
    (the other checkout's tool, which may predate the option, never gets it). `router` is the
    router this checkout's tool drives; `alternate_router` the other checkout's (default: the
    same), e.g. HAProxy for a commit that predates the relay."""
    here = Path(__file__).resolve().parents[1]
    mine = commit_of(here)
    tools = [Tool("dbmigrate", commit=mine, params=HOLD if hold == "on" else {}, router=router)]
    if hold == "both":
        tools.append(Tool("dbmigrate+hold", commit=mine, params=HOLD, router=router))
    if alternate_with is not None:
        other = commit_of(alternate_with)
        tools.append(Tool(f"dbmigrate@{other}", tree=alternate_with.resolve(), commit=other,
                          router=alternate_router or router))
    if orchestrator_url:
        tools.append(Tool("orchestrator", via="orchestrator", router="haproxy"))
    return tools


def routers_of(tools: list[Tool]) -> list[str]:
    """The router kinds the run needs, in the order the tools name them."""
    return list(dict.fromkeys(t.router for t in tools))


def verify_table(router: str, routers: list[str]) -> dict[str, Any]:
    """The zero-loss writer's table: one writer per router when rounds drive different ones."""
    return {} if len(routers) == 1 else {"table": f"app.dbmigrate_verify_{router}"}


def pools_through(inv, name: str):
    """A maker of the application's three pools writing through the cluster's router in `inv`."""
    router = inv.cluster(name).router
    if router.kind == "relay":
        relay_host, _, relay_port = router.address.rpartition(":")
        writes_to = FixedAddress(relay_host, int(relay_port))
    else:
        writes_to = FixedAddress(router.address, router.writer_port)
    return lambda: ClientProcess(writes_to, inv.app_credentials(name))


def point_other_routers(inventories: dict[str, Path], name: str, round_router: str, writer: str) -> None:
    """Between rounds of tools that drive different routers: every router the round did not
    drive is pointed at the writer it left, as an operator keeping two routers would; nothing
    else changes (a no-op when it already points there)."""
    for kind, path in inventories.items():
        if kind != round_router:
            router_for(load_inventory(path), name).switch_writer(writer)


def warm_compiled_modules(pb: Path, tree: Path | None = None) -> None:
    """One dry run before the writer and the load start, not counted: an installed package has its
    modules compiled, so the first measured round must not compile them."""
    subprocess.run(dbmigrate_cmd() + ["run", str(pb), "--dry-run", "--yes", "--json"], env=tool_env(tree),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


TOOL_CPUS = ""  # --tool-cpus: the cores the tool runs on, everything else on the others


def pin_apart(tool_cpus: str) -> str:
    """Everything this bench starts from now on (servers, HAProxy, sysbench, the writer) on the
    cores the tool is not given: the tool then runs as from a host of its own would, as far as
    CPU goes. Returns the cores left to the rest, as taskset writes them."""
    global TOOL_CPUS
    mine: set[int] = set()
    for part in tool_cpus.split(","):
        lo, _, hi = part.partition("-")
        mine |= set(range(int(lo), int(hi or lo) + 1))
    rest = os.sched_getaffinity(0) - mine
    if not mine or not rest or not mine <= os.sched_getaffinity(0):
        raise SystemExit(f"--tool-cpus {tool_cpus}: give the tool some of the cores {sorted(os.sched_getaffinity(0))}, "
                         "not all of them")
    os.sched_setaffinity(0, rest)
    TOOL_CPUS = ",".join(map(str, sorted(mine)))
    return ",".join(map(str, sorted(rest)))


def run_as_operator(pb: Path, moments: "Moments", tree: Path | None = None) -> tuple[Any, float, float, float]:
    """`dbmigrate run PB --yes --json` in a process of its own, as an operator starts it: its
    start-up and CPU count. Returns (outcome, exec time, exit time (monotonic), CPU seconds)."""
    from dbmigrate.engine import events as ev

    offset = time.time() - time.monotonic()
    moments.time_of = lambda e: datetime.fromisoformat(e.at.replace("Z", "+00:00")).timestamp() - offset
    t0 = time.monotonic()
    env = tool_env(tree)
    pin = ["taskset", "-c", TOOL_CPUS] if TOOL_CPUS else []  # --tool-cpus: cores of its own
    p = subprocess.Popen(pin + dbmigrate_cmd() + ["run", str(pb), "--yes", "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=env)
    lines = p.stdout.read().splitlines()
    _, status, usage = os.wait4(p.pid, 0)
    t1 = time.monotonic()
    run_id, final = "", None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        kind = rec.pop("event", None)
        rec.pop("record", None)
        cls = getattr(ev, kind or "", None)
        if not isinstance(cls, type):
            continue
        fields = {k: v for k, v in rec.items() if k in cls.__dataclass_fields__}
        event = cls(**fields)
        run_id = run_id or event.run_id
        moments(event)
        # What the step events do not show: the run's start (after the tool's start-up), its
        # phases and gates (preflight is a gate's checks, not steps).
        when = moments.time_of(event)
        if isinstance(event, ev.RunStarted):
            moments.events.append((when, "run: the run started"))
        elif isinstance(event, ev.PhaseStarted):
            moments.events.append((when, f"{event.phase}: phase started"))
        elif isinstance(event, ev.GateDecided):
            moments.events.append((when, f"{event.phase}: gate {event.gate} decided"))
        if isinstance(event, ev.RunFinished):
            final = event
    outcome = type("Outcome", (), {"run_id": run_id, "status": final.status if final else "unknown",
                                   "summary": final.summary if final else f"exit {os.waitstatus_to_exitcode(status)}"})
    return outcome, t0, t1, usage.ru_utime + usage.ru_stime


def phase_of(t: float, exec_at: float, moments: "Moments") -> str:
    """Which part of the tool's run a moment lay in."""
    for s, e in moments.windows():
        if s <= t <= e:
            return "fenced window"
    started = sorted((when, what) for when, what in moments.events if what.endswith(" started")
                     or " gate " in what)
    if not started or t < started[0][0]:
        return "start-up (exec to the run's first event)"
    last = max((x for x in started if x[0] <= t), default=started[0])
    return last[1].split(":")[0]


def outside_window_gaps(acks, span: tuple[float, float], windows: list[tuple[float, float]]) -> list[tuple]:
    """The writer's gaps during the tool's run that touch no fenced window: (ms, start, end)."""
    out = []
    for prev, cur in zip(acks, acks[1:]):
        if cur.mono < span[0] or prev.mono > span[1]:
            continue
        if any(cur.mono >= s and prev.mono <= e for s, e in windows):
            continue
        out.append(((cur.mono - prev.mono) * 1000, prev.mono, cur.mono))
    return out


def journaled_cutover(run_id: str) -> dict:
    with Journal(resolve_journal_path()) as j:
        return (j.get_state(run_id, "cutover", {}) or {}).get("data") or {}


def fence_sentence(run_id: str) -> str:
    with Journal(resolve_journal_path()) as j:
        return next((s["sentence"] or "" for s in j.run_detail(run_id)["steps"]
                     if s["name"].startswith("fence ") and s["action"] == "run"), "")


def load_without_tool(load: Sysbench, rate: int | None, seconds: float) -> tuple[float, float]:
    """The same load with no tool running, for as long as the run took: what the writer sees then
    is the reference for what it saw during the run. A sysbench of its own (the round's dies at
    the flip), started as the round's was, 1 s before the span that counts."""
    bg = load.start_background(time_s=60, rate=rate)
    try:
        time.sleep(1.0)
        start = time.monotonic()
        time.sleep(seconds)
        return start, time.monotonic()
    finally:
        try:
            bg.stop()
        except Exception:
            pass


def one_round(state, name: str, target: str, tool: Tool, load: Sysbench, verifier, rate: int | None,
              spans: list[tuple[float, float]], budget_s: float | None = FENCED_CATCHUP_BUDGET_S,
              operator: bool = True, baselines: list[tuple[float, float]] | None = None, clients=None,
              inventory: Path | None = None) -> dict:
    via = tool.via
    # Debian's sysbench 1.0.20 dies on reconnect after a flip (upstream #527): one per round.
    bg = load.start_background(time_s=60, rate=rate)
    time.sleep(1.0)
    errors_before = verifier.errors
    error_times_before = len(verifier.error_times())
    moments = Moments()
    t0 = time.monotonic()
    wall0 = time.time()
    cpu_s = None
    if (operator and via == "dbmigrate") or tool.tree is not None:
        outcome, t0, t1, cpu_s = run_as_operator(playbook(state, name, target, via, budget_s, tool.params, tool.label,
                                                          inventory), moments, tool.tree)
    else:
        # Progress rendered as `dbmigrate run` renders it (to a null device): its cost is the tool's.
        console = ConsoleRenderer(Console(file=DEVNULL, force_terminal=True, width=160, highlight=False,
                                          soft_wrap=True))
        outcome = start_run(playbook(state, name, target, via, budget_s, tool.params, tool.label, inventory), assume_yes=True,
                            subscribers=[moments, console])
        t1 = time.monotonic()
    spans.append((t0, t1))
    time.sleep(0.3)
    # What the application's pools saw from the tool's start to just after its end.
    seen = clients.summary(since=wall0, until=time.time()) if clients is not None else {}
    try:
        done = bg.stop()  # stopped, not finished: its per-second lines say the rate it ran at
        load_tps = statistics.median(i.tps for i in done.intervals) if done.intervals else done.tps
    except Exception:
        load_tps = None
    if baselines is not None:
        baselines.append(load_without_tool(load, rate, t1 - t0))
    window = moments.window()
    acks = verifier.acks
    windows, whole = moments.windows(), moments.from_first_convergence()
    errors = {k: n - errors_before.get(k, 0) for k, n in verifier.errors.items() if n - errors_before.get(k, 0)}
    cut = journaled_cutover(outcome.run_id)
    outside = outside_window_gaps(acks, (t0, t1), windows)
    in_windows = [((cur.mono - prev.mono) * 1000, prev.mono, cur.mono) for prev, cur in zip(acks, acks[1:])
                  if any(cur.mono >= s and prev.mono <= e for s, e in windows)]
    worst = max(outside + in_windows, default=None)
    return {
        # Every gap of the writer that overlaps the tool's whole call, from exec to exit.
        "gap_ms_whole_call": round(worst[0], 1) if worst else None,
        "gap_whole_call_where": {"phase": phase_of(worst[1], t0, moments), "from_ms_after_exec": round(
            (worst[1] - t0) * 1000), "events_in_gap": [what for when, what in moments.events
                                                        if worst[1] - 0.01 <= when <= worst[2] + 0.01],
                                 "writer_errors": [kind for when, kind in verifier.error_times(error_times_before)
                                                   if worst[1] <= when <= worst[2]]} if worst else None,
        "outside_window_gaps_ms": [round(g[0], 2) for g in outside],
        # The same, split at the windows: the start-up and preflight (the round's load is running)
        # and what follows the last window (verify, the journal, the exit; the load died at the flip).
        "outside_window_gaps_ms_before_fence": [round(g[0], 2) for g in outside if windows and g[2] < windows[0][0]],
        "outside_window_gaps_ms_after_window": [round(g[0], 2) for g in outside if windows and g[1] > windows[-1][1]],
        "outside_window_max_where": ({"phase": phase_of(m[1], t0, moments), "ms": round(m[0], 1),
                                      "from_ms_after_exec": round((m[1] - t0) * 1000)}
                                     if (m := max(outside, default=None)) else None),
        "tool_cpu_s": round(cpu_s, 3) if cpu_s is not None else None,
        "via": via, "tool": tool.label, "router": tool.router, "target": target, "status": outcome.status,
        "refused": outcome.summary if outcome.status != "done" else None,
        # A round that did not switch still counts what the writer saw while it tried.
        "gap_ms": round(max(gap_in(acks, *w) for w in windows), 1) if windows else None,
        # With the pauses between attempts (writes flowing, nothing fenced) counted in too.
        "gap_ms_from_first_convergence": round(gap_in(acks, *whole), 1) if whole else None,
        "fence_to_open_ms": round((window[1] - window[0]) * 1000, 1) if window and moments.converged else None,
        "given_up_attempts_ms": [round((e - b) * 1000, 1) for b, e in moments.given_up],
        "converge_wait_ms": round((moments.converged - moments.cutover_started) * 1000, 1)
        if moments.converged and moments.cutover_started else None,
        "lag_at_fence_trx": cut.get("lag_at_fence_trx"),
        "steps_end_ms_after_fence": moments.inside(),
        "fence": fence_sentence(outcome.run_id) if via == "dbmigrate" else None,
        "fence_given_up": ["blocked" if "behind running statement" in m else
                           "candidate did not apply in budget" if "catch-up budget" in m else m
                           for m in moments.retries],
        "fence_given_up_detail": moments.retries,
        "fence_watchdog": moments.watchdog,
        "writer_errors": errors,
        "longest_gap": longest_gap_where(acks, windows, verifier.error_times(error_times_before), moments.events),
        "run_ms": round((t1 - t0) * 1000),
        "load_tps": round(load_tps) if load_tps else None,
        **{k: seen[k] for k in ("client_errors", "client_error_classes", "client_stall_max_ms",
                                "client_stalls_ms") if k in seen},
    }


def gap_stats(gaps: list[float]) -> dict:
    return {"p50": round(statistics.median(gaps), 1) if gaps else None,
            "p95": round(pct(gaps, 95), 1) if gaps else None,
            "max": round(max(gaps), 1) if gaps else None}


def gaps_without_cutover(acks, spans: list[tuple[float, float]], names: dict[int, str],
                         margin_s: float = 0.05) -> dict[str, dict]:
    """The writer's gaps while no cutover ran (load on, tool idle), per server that took the
    writes: what the application sees from the servers and the machine alone, the reference
    for the gaps measured at the cutovers."""
    by_server: dict[str, list[float]] = {}
    for prev, cur in zip(acks, acks[1:]):
        if any(start - margin_s <= cur.mono and prev.mono <= end + margin_s for start, end in spans):
            continue
        if prev.server_id != cur.server_id:
            continue
        by_server.setdefault(names.get(prev.server_id, str(prev.server_id)), []).append((cur.mono - prev.mono) * 1000)
    return {name: {"gaps": len(g), "p50": round(statistics.median(g), 2), "p99": round(pct(g, 99), 1),
                   "max": round(max(g), 1), "over_10_ms": sum(x > 10 for x in g)}
            for name, g in sorted(by_server.items())}


def no_tool_gaps(acks, baselines: list[tuple[float, float]]) -> list[float]:
    """The writer's gaps (ms) within the spans of the same load with no tool running."""
    return [(cur.mono - prev.mono) * 1000 for prev, cur in zip(acks, acks[1:])
            if any(start <= prev.mono and cur.mono <= end for start, end in baselines)]


def outside_window_summary(rounds: list[dict], base_gaps: list[float]) -> dict | None:
    """The writer's gaps during the tool's runs outside their fenced windows, beside the same
    writer's gaps with no tool running (same run): p99 and max, and their ratios."""
    gaps = [g for r in rounds for g in r.get("outside_window_gaps_ms") or []]
    if not gaps or not base_gaps:
        return None
    p99, mx = pct(gaps, 99), max(gaps)
    b99, bmax = pct(base_gaps, 99), max(base_gaps)

    def part(key: str) -> dict | None:
        g = [x for r in rounds for x in r.get(key) or []]
        return {"gaps": len(g), "p99": round(pct(g, 99), 1), "max": round(max(g), 1),
                "p99_ratio": round(pct(g, 99) / max(b99, 0.001), 2)} if g else None

    return {"before_fence": part("outside_window_gaps_ms_before_fence"),
            "after_window": part("outside_window_gaps_ms_after_window"),"gaps": len(gaps), "p50": round(statistics.median(gaps), 2), "p99": round(p99, 1), "max": round(mx, 1),
            "no_tool_gaps": len(base_gaps), "no_tool_p99": round(b99, 1), "no_tool_max": round(bmax, 1),
            "p99_ratio": round(p99 / max(b99, 0.001), 2), "max_ratio": round(mx / max(bmax, 0.001), 2),
            "worst": max((r["outside_window_max_where"] for r in rounds if r.get("outside_window_max_where")),
                         key=lambda w: w["ms"], default=None)}


def summary(rounds: list[dict], tool: Tool) -> dict:
    mine = [r for r in rounds if r.get("tool", r["via"]) == tool.label]
    via = tool.via
    gaps = [r["gap_ms"] for r in mine if r["gap_ms"] is not None and r["status"] == "done"]
    unswitched = [r["gap_ms"] for r in mine if r["gap_ms"] is not None and r["status"] != "done"]
    waits = [r["converge_wait_ms"] for r in mine if r["converge_wait_ms"] is not None]
    lags = [r["lag_at_fence_trx"] for r in mine if r["lag_at_fence_trx"] is not None]
    return {"via": via, "tool": tool.label, "commit": tool.commit, "router": tool.router, "rounds": len(mine),
            "switched": len(gaps),
            "refused": [r["refused"] for r in mine if r["refused"]],
            "gap_ms": gap_stats(gaps),
            "gap_ms_from_first_convergence": gap_stats(
                [r["gap_ms_from_first_convergence"] for r in mine
                 if r["gap_ms_from_first_convergence"] is not None and r["status"] == "done"]),
            "converge_wait_ms": {"p50": round(statistics.median(waits), 1) if waits else None,
                                 "max": round(max(waits), 1) if waits else None},
            "gap_ms_max_in_rounds_that_did_not_switch": max(unswitched) if unswitched else None,
            "lag_at_fence_trx_max": max(lags) if lags else None,
            "load_tps_p50": statistics.median(t) if (t := [r["load_tps"] for r in mine if r["load_tps"]]) else None,
            "writer_errors": sum(sum(r["writer_errors"].values()) for r in mine),
            # What the application's pools saw, per kind: errors over the rounds (per round beside),
            # their classes, and the longest call of any pool.
            "client_errors": {k: sum((r.get("client_errors") or {}).get(k, 0) for r in mine) for k in CLIENT_KINDS},
            "client_errors_per_round": {k: [(r.get("client_errors") or {}).get(k, 0) for r in mine]
                                        for k in CLIENT_KINDS},
            "client_error_classes": {k: merged_classes(mine, k) for k in CLIENT_KINDS},
            "client_stall_max_ms": max((r.get("client_stall_max_ms") or 0 for r in mine), default=None),
            "client_stall_ms_p50": statistics.median(st) if (st := [r["client_stall_max_ms"] for r in mine
                                                                     if r.get("client_stall_max_ms")]) else None,
            "fence_attempts_given_up": {why: sum(r["fence_given_up"].count(why) for r in mine)
                                        for why in sorted({w for r in mine for w in r["fence_given_up"]})},
            # Per candidate: with --lagging, the rounds to the lagging candidate are the ones that
            # test convergence; the rounds back run on that slow server as the primary.
            "gap_ms_by_candidate": {t: gap_stats([r["gap_ms"] for r in mine if r["target"] == t and r["status"] == "done"
                                                  and r["gap_ms"] is not None]) | {
                                        "rounds": sum(r["target"] == t for r in mine)}
                                    for t in sorted({r["target"] for r in mine})}}


def merged_classes(rounds: list[dict], kind: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rounds:
        for cls, n in ((r.get("client_error_classes") or {}).get(kind) or {}).items():
            out[cls] = out.get(cls, 0) + n
    return out


def discover(state, name: str, url: str) -> None:
    from dbmigrate.topology.orchestrator import OrchestratorClient

    doc = yaml.safe_load(state.inventory_file.read_text())
    doc["clusters"][name]["orchestrator_url"] = url
    state.inventory_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    client = OrchestratorClient(url)
    for s in load_inventory(state.inventory_file).cluster(name).servers.values():
        client.discover(s.host, s.port)


def run_bench(rounds: int, lagging: bool, orchestrator_url: str | None, say, rate: int | None = None,
              candidate_buffer_pool_mb: int | None = None,
              budget_s: float | None = FENCED_CATCHUP_BUDGET_S, operator: bool = True,
              alternate_with: Path | None = None, hold: str = "off", router_kind: str = "haproxy",
              alternate_router: str | None = None) -> dict:
    tools = tools_for(orchestrator_url, alternate_with, hold, router_kind, alternate_router)
    routers = routers_of(tools)
    boxes = Sandboxes()
    name = f"bench{os.getpid() % 10000}"
    boxes.up(name, 2)
    writers: dict[str, WriterProcess] = {}
    clients = None
    try:
        boxes.add_instance(name, f"{name}-new", replica_of=f"{name}-1",
                           buffer_pool_mb=candidate_buffer_pool_mb
                           or (LAGGING_BUFFER_POOL_MB if lagging else BUFFER_POOL_MB),
                           extra=LAGGING_CANDIDATE if lagging else None)
        haproxy.start(boxes, name)
        state = boxes.find(name)
        # One inventory per router kind: the sandbox's names the relay once it starts, a copy
        # taken before keeps HAProxy for the tool that drives it (one that predates the relay).
        inventories = {"haproxy": state.inventory_file}
        if "relay" in routers:
            if "haproxy" in routers:
                inventories["haproxy"] = state.path / "inventory-haproxy.yaml"
                inventories["haproxy"].write_text(state.inventory_file.read_text())
            sandbox_relay.start(boxes, name, max_hold_s=15)  # the cluster's router from here on
            state = boxes.find(name)
            inventories["relay"] = state.inventory_file
        inventories = {k: v for k, v in inventories.items() if k in routers}
        if orchestrator_url:
            discover(state, name, orchestrator_url)
        invs = {k: load_inventory(v) for k, v in inventories.items()}
        loads = {k: Sysbench.for_cluster(inv, name, workload="oltp_write_only", tables=4 if lagging else 2,
                                         table_size=5000 if lagging else 2000, threads=8 if lagging else 2)
                 for k, inv in invs.items()}
        loads[routers[0]].prepare()  # one set of tables, whichever router the round's load goes through
        if operator:
            for tool in tools:
                if tool.via == "dbmigrate":
                    warm_compiled_modules(playbook(state, name, f"{name}-new", "dbmigrate", budget_s, tool.params,
                                                   tool.label, inventories[tool.router]), tool.tree)
        # The application: its own process (see writer_process.py), one write every ~1 ms; one
        # per router when the tools drive different ones (each round's gap is its router's writer's).
        for kind, path in inventories.items():
            writers[kind] = WriterProcess(path, name, interval_s=WRITER_INTERVAL_S,
                                          retry_pause_s=WRITER_RETRY_PAUSE_S, **verify_table(kind, routers))
            writers[kind].start()
            writers[kind].wait_for_acks(50)
        # The application's three pool kinds side by side, writing through the router: for the
        # whole run, or (tools on different routers) started for each round through its router.
        with invs[routers[0]].open(f"{name}-1") as p:
            create_table(p)
        pools_for = {k: pools_through(inv, name) for k, inv in invs.items()}
        if len(routers) == 1:
            clients = pools_for[routers[0]]().start()
            clients.wait_for_calls(5)
        targets = [f"{name}-new", f"{name}-1"]
        done: list[dict] = []
        spans: list[tuple[float, float]] = []  # (start, end) of each cutover run, monotonic
        baselines: list[tuple[float, float]] = []  # the same load, no tool, as long as each run
        where = 0  # index in targets of the current primary's successor
        for i in range(rounds * len(tools)):
            tool = tools[(i // 2) % len(tools)]  # two rounds (there and back) per tool, alternating
            round_clients = clients
            if round_clients is None:
                round_clients = pools_for[tool.router]().start()
                round_clients.wait_for_calls(5)
            try:
                r = one_round(state, name, targets[where], tool, loads[tool.router], writers[tool.router], rate,
                              spans, budget_s, operator, baselines, round_clients, inventories[tool.router])
            finally:
                if clients is None:
                    round_clients.stop()
            done.append(r)
            if r["status"] == "done":
                where = 1 - where
            if len(routers) > 1:
                point_other_routers(inventories, name, tool.router,
                                    f"127.0.0.1:{state.instances[targets[1 - where]].port}")
                # The other routers' writers reconnect to the writer now; until then they were
                # refused (not a gap of any tool's): the span outside cutovers starts after.
                time.sleep(WRITER_RETRY_PAUSE_S + 0.5)
                spans[-1] = (spans[-1][0], time.monotonic())
            say(f"{tool.label} round {len(done)}: -> {r['target']} {r['status']}, gap {r['gap_ms']} ms, fence->open "
                f"{r['fence_to_open_ms']} ms, converge wait {r['converge_wait_ms']} ms, lag at fence "
                f"{r['lag_at_fence_trx']} trx, writer errors {r['writer_errors'] or 0}, run {r['run_ms']} ms; "
                f"{console_line(r)}"
                + (f"\n    refused: {r['refused']}" if r["refused"] else ""))
        names = {i.server_id: n for n, i in state.instances.items()}
        without_cutover, outside = {}, {}
        for kind, w in writers.items():
            w.wait_for_acks(len(w.acks) + 20)
            without_cutover[kind] = gaps_without_cutover(w.acks, spans, names)
            # Each writer against the no-tool spans taken after its own router's rounds.
            own = [(r, base) for r, base in zip(done, baselines) if r["router"] == kind]
            outside[kind] = outside_window_summary([r for r, _ in own], no_tool_gaps(w.acks, [x for _, x in own]))
        whole = [r["gap_ms_whole_call"] for r in done if r.get("gap_ms_whole_call") is not None]
        over_30 = [{"round": i + 1, "gap_ms": r["gap_ms_whole_call"], **(r["gap_whole_call_where"] or {})}
                   for i, r in enumerate(done) if (r.get("gap_ms_whole_call") or 0) > 30]
        reports = {kind: w.check(catch_up_timeout_s=60) for kind, w in writers.items()}
        writer = targets[1 - where]  # the primary after the last round
        mixed = len(routers) > 1
        out = {"router": router_kind if not mixed else "/".join(routers),
               "routers_by_tool": {t.label: t.router for t in tools},
               "lagging": lagging, "load_rate_tps": rate, "fenced_catchup_budget_s": budget_s, "candidate_buffer_pool_mb": candidate_buffer_pool_mb
               or (LAGGING_BUFFER_POOL_MB if lagging else BUFFER_POOL_MB), "results": [summary(done, t) for t in tools], "rounds": done,
               # Lost: acknowledged and not on the server that takes the writes at the end.
               "lost_writes": sum(len(rep.lost.get(writer, [])) for rep in reports.values()),
               "acknowledged": sum(rep.acknowledged for rep in reports.values()),
               "missing_anywhere": sum(rep.lost_total for rep in reports.values()),
               # Per server, with whether it caught up within the check: a replica still behind
               # counts its not-yet-applied writes here too.
               "missing_by_server": {n: sum(len(rep.lost.get(n, [])) for rep in reports.values())
                                     for n in {n for rep in reports.values() for n, ids in rep.lost.items() if ids}},
               "caught_up": {n: all(rep.caught_up.get(n, True) for rep in reports.values())
                             for n in {n for rep in reports.values() for n in rep.caught_up}},
               "writer_gap_ms_without_cutover": without_cutover[routers[0]] if not mixed else without_cutover,
               # The tool's whole call (exec to exit), outside its fenced windows, against no tool at all.
               "outside_window": outside[routers[0]] if not mixed else outside,
               "gap_ms_whole_call": {"p50": round(statistics.median(whole), 1) if whole else None,
                                     "max": max(whole) if whole else None, "rounds": len(whole)},
               "rounds_over_30_ms_whole_call": over_30,
               "tool_cpu_s_p50": statistics.median(c) if (c := [r["tool_cpu_s"] for r in done
                                                                 if r.get("tool_cpu_s") is not None]) else None,
               "tool_cpus": TOOL_CPUS or "shared with everything else",
               "tool_started_as": "dbmigrate run (its own process)" if operator else "start_run in the bench's process",
               "load_average_1min": round(os.getloadavg()[0], 2)}
        by_label = {x["tool"]: x for x in out["results"]}
        for key, other in (("p50_ratio_vs_orchestrator", "orchestrator"),
                           ("p50_ratio_vs_alternate", next((t.label for t in tools if t.tree is not None), None))):
            if other in by_label:
                a, b = by_label["dbmigrate"]["gap_ms"]["p50"], by_label[other]["gap_ms"]["p50"]
                out[key] = round(a / max(b, 0.001), 3) if a and b else None
        # The whole call's longest gap per tool: with --alternate-with, the before/after of it.
        out["gap_ms_whole_call_by_tool"] = {t.label: gap_stats([r["gap_ms_whole_call"] for r in done
                                                                if r.get("tool") == t.label
                                                                and r.get("gap_ms_whole_call") is not None])
                                            for t in tools}
        return out
    finally:
        if clients is not None:
            clients.stop()
        for w in writers.values():
            w.kill()
        boxes.down(name)


def render(out: dict) -> None:
    print(f"candidate's buffer pool: {out['candidate_buffer_pool_mb']} MB"
          + (" (lagging by design: single-threaded apply, 8 sysbench threads)" if out["lagging"] else ""))
    for r in out["results"]:
        g, w = r["gap_ms"], r["converge_wait_ms"]
        print(f"{r['tool']:>12}" + (f" ({r['commit']})" if r.get("commit") else "") + f": {r['switched']}/{r['rounds']} switched; gap at the cutover p50 {g['p50']} ms, "
              f"p95 {g['p95']} ms, max {g['max']} ms; converge wait p50 {w['p50']} ms, max {w['max']} ms; "
              f"lag at fence max {r['lag_at_fence_trx_max']} trx; writer errors {r['writer_errors']}")
        if r.get("client_errors"):
            per = "; ".join(f"{k} {n}" + (f" ({', '.join(f'{c}: {m}' for c, m in r['client_error_classes'][k].items())})"
                                          if r["client_error_classes"].get(k) else "")
                            for k, n in r["client_errors"].items())
            print(f"{'':>12}  application pools, errors over {r['rounds']} switchover(s): {per}; longest client "
                  f"stall {r['client_stall_max_ms']} ms (per round p50 {r['client_stall_ms_p50']} ms)")
        f = r["gap_ms_from_first_convergence"]
        if f != g:
            print(f"{'':>12}  counting the pauses between fence attempts too (writes flowing, nothing fenced): "
                  f"p50 {f['p50']} ms, p95 {f['p95']} ms, max {f['max']} ms")
        if r["fence_attempts_given_up"]:
            print(f"{'':>12}  fence attempts given up (then tried again): "
                  + ", ".join(f"{n} {why}" for why, n in r["fence_attempts_given_up"].items()))
        for reason in r["refused"]:
            print(f"{'':>12}  refused: {reason}")
        if r["gap_ms_max_in_rounds_that_did_not_switch"] is not None:
            print(f"{'':>12}  longest gap in a round that did not switch: "
                  f"{r['gap_ms_max_in_rounds_that_did_not_switch']} ms")
        if len(r["gap_ms_by_candidate"]) > 1:
            for target, t in r["gap_ms_by_candidate"].items():
                print(f"{'':>12}  to {target}: gap p50 {t['p50']} ms, p95 {t['p95']} ms, max {t['max']} ms "
                      f"({t['rounds']} rounds)")
        if r["via"] == "dbmigrate" and g["p50"] is not None:
            print(f"{'':>12}  targets: p50 <= {TARGET_P50_MS} ms ({g['p50'] / TARGET_P50_MS:.2f}x), "
                  f"max <= {TARGET_MAX_MS} ms ({g['max'] / TARGET_MAX_MS:.2f}x)")
    o = out.get("outside_window")
    if o:
        print(f"writer's gaps during the tool's runs ({out['tool_started_as']}; tool on cores: {out['tool_cpus']}), outside the fenced windows: "
              f"p50 {o['p50']} ms, p99 {o['p99']} ms, max {o['max']} ms; with no tool running: p99 {o['no_tool_p99']} "
              f"ms, max {o['no_tool_max']} ms; ratio p99 {o['p99_ratio']}x, max {o['max_ratio']}x (target <= 1.2x)")
        for key, label in (("before_fence", "before the first fence"), ("after_window", "after the last window")):
            if o.get(key):
                print(f"  {label}: p99 {o[key]['p99']} ms ({o[key]['p99_ratio']}x), max {o[key]['max']} ms "
                      f"over {o[key]['gaps']} gaps")
        if o["worst"]:
            print(f"  the longest outside the window: {o['worst']['ms']} ms in {o['worst']['phase']}, "
                  f"{o['worst']['from_ms_after_exec']} ms after exec")
    w = out.get("gap_ms_whole_call") or {}
    if w.get("rounds"):
        print(f"longest gap overlapping the tool's whole call: p50 {w['p50']} ms, max {w['max']} ms over {w['rounds']} "
              f"rounds (target max <= {TARGET_MAX_MS} ms); tool CPU per run p50 {out.get('tool_cpu_s_p50')} s")
    for r in out.get("rounds_over_30_ms_whole_call") or []:
        print(f"  round {r['round']}: {r['gap_ms']} ms in {r.get('phase')} ({r.get('from_ms_after_exec')} ms after exec)"
              f"; events: {', '.join(r.get('events_in_gap') or []) or 'none'}"
              f"; writer errors: {', '.join(r.get('writer_errors') or []) or 'none'}")
    for server, w in out["writer_gap_ms_without_cutover"].items():
        print(f"writer's gap with no cutover running, {server} the primary: p50 {w['p50']} ms, p99 {w['p99']} ms, "
              f"max {w['max']} ms ({w['over_10_ms']} of {w['gaps']} over 10 ms)")
    print(f"lost writes: {out['lost_writes']} of {out['acknowledged']} acknowledged (on the final primary); "
          f"missing anywhere after the wait: {out['missing_anywhere']} {out['missing_by_server'] or ''}")
    if out.get("p50_ratio_vs_orchestrator") is not None:
        print(f"p50 dbmigrate / orchestrator = {out['p50_ratio_vs_orchestrator']}")
    if out.get("p50_ratio_vs_alternate") is not None:
        print(f"p50 this checkout / the other = {out['p50_ratio_vs_alternate']}")
    if len(out.get("gap_ms_whole_call_by_tool") or {}) > 1:
        print("longest gap over the whole call, per tool: " + "; ".join(
            f"{label} p50 {g['p50']} ms, max {g['max']} ms" for label, g in out["gap_ms_whole_call_by_tool"].items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--lagging", action="store_true", help="a candidate that lags by design")
    ap.add_argument("--rate", type=int, default=None,
                    help="throttle sysbench to this many transactions/s (default: as fast as it goes, "
                         "which saturates 2 cores)")
    ap.add_argument("--candidate-buffer-pool-mb", type=int, default=None,
                    help=f"the candidate's buffer pool (default {BUFFER_POOL_MB}, {LAGGING_BUFFER_POOL_MB} with --lagging)")
    ap.add_argument("--in-process", action="store_true",
                    help="run the promotion inside the bench's process (start_run) instead of as `dbmigrate run`: "
                         "without the tool's start-up")
    ap.add_argument("--fenced-catchup-budget-ms", type=float, default=FENCED_CATCHUP_BUDGET_S * 1000,
                    help="the playbook's fenced_catchup_budget_s, in ms (0: none, the catch-up step waits)")
    ap.add_argument("--tool-cpus", default="",
                    help="run the tool on these cores (taskset list, e.g. 1) and everything else the bench starts "
                         "on the others: the tool as from a host of its own, as far as CPU goes")
    ap.add_argument("--hold-new-connections", nargs="?", const="on", default="off", choices=["on", "off", "both"],
                    help="the playbook's hold_new_connections: HAProxy holds new connections while the writer "
                         "moves, and the old writer's sessions end when idle; `both`: this checkout's tool "
                         "alternately with and without it (another checkout's tool never gets it)")
    ap.add_argument("--alternate-with", type=Path, default=None, metavar="TREE",
                    help="a checkout of another commit: rounds alternate its tool with this checkout's, on the "
                         "same sandbox and load (a before/after in one run)")
    ap.add_argument("--router", choices=("haproxy", "relay"), default="haproxy",
                    help="the router the writer, the load and the pools write through, and promote drives")
    ap.add_argument("--alternate-router", choices=("haproxy", "relay"), default=None,
                    help="with --alternate-with: the router the other checkout's tool drives (default: --router), "
                         "e.g. haproxy for a commit that predates the relay; each round's writer, load and pools "
                         "then write through that round's router, and the router a round did not drive is "
                         "pointed at the new writer after it")
    args = ap.parse_args()
    if args.alternate_with is not None and not (args.alternate_with / "dbmigrate" / "__main__.py").is_file():
        ap.error(f"--alternate-with {args.alternate_with}: not a checkout of this project (no dbmigrate/__main__.py)")
    if args.alternate_router is not None and args.alternate_with is None:
        ap.error("--alternate-router names the router of --alternate-with's tool: give --alternate-with TREE")
    if args.alternate_with is not None and args.in_process:
        ap.error("--alternate-with runs each tool in a process of its own (not --in-process)")
    if args.tool_cpus:
        if args.in_process:
            ap.error("--tool-cpus needs the tool in a process of its own (not --in-process)")
        pin_apart(args.tool_cpus)
    import shutil
    import tempfile

    if "DBMIGRATE_HOME" not in os.environ:  # a private home, removed at the end
        os.environ["DBMIGRATE_HOME"] = tempfile.mkdtemp(prefix="dbm-bench-")
        import atexit

        atexit.register(shutil.rmtree, os.environ["DBMIGRATE_HOME"], ignore_errors=True)
    home = Path(os.environ["DBMIGRATE_HOME"])
    os.environ.setdefault("DBMIGRATE_JOURNAL", str(home / "journal.sqlite"))
    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    url = os.environ.get("ORCHESTRATOR_URL")
    if not url:
        say("orchestrator: skipped (ORCHESTRATOR_URL is not set: no orchestrator to compare with)")
    out = run_bench(args.rounds, args.lagging, url, say, rate=args.rate,
                    candidate_buffer_pool_mb=args.candidate_buffer_pool_mb,
                    budget_s=args.fenced_catchup_budget_ms / 1000 or None, operator=not args.in_process,
                    alternate_with=args.alternate_with, hold=args.hold_new_connections,
                    router_kind=args.router, alternate_router=args.alternate_router)
    if not url:
        out["orchestrator"] = "skipped: ORCHESTRATOR_URL is not set"
    if args.json:
        print(json.dumps({k: v for k, v in out.items() if k != "rounds"} | {"rounds": out["rounds"]}, indent=2))
    else:
        render(out)
    return 0 if out["lost_writes"] == 0 and out["missing_anywhere"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
