"""`dbmigrate digest ...`: capture query digests, compare before/after, restore after a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from dbmigrate.exceptions import CommandFailed
from dbmigrate.app import digests
from dbmigrate.cli.common import console, err_console, print_json
from dbmigrate.console_table import emit
from dbmigrate.exceptions import UsageError

cmd = typer.Typer(help="Query digests (pt-query-digest): capture, compare before/after, guard policy.",
                  no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cmd, name="digest")


def _progress(msg: str) -> None:
    err_console.print(f"[dim]… {msg}[/]", highlight=False)


@cmd.command("capture")
def capture(
    inventory: Optional[Path] = typer.Option(None, "--inventory", "-i", help="Inventory file."),
    server: Optional[str] = typer.Option(None, "--server", "-s", help="Server name or host:port from the inventory."),
    seconds: float = typer.Option(20.0, "--seconds", help="Length of the slow-log window."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Digest file (default $DBMIGRATE_HOME/digests/...)."),
    slow_log: Optional[Path] = typer.Option(None, "--slow-log", help="Digest this existing slow log instead of opening a window."),
    saved_settings: Optional[Path] = typer.Option(None, "--saved-settings",
                                                  help="Where to keep the server's previous settings (default: next to --out)."),
    log_file: Optional[str] = typer.Option(None, "--server-log-file", help="Server-side path of the window's slow log."),
    sample: int = typer.Option(1, "--sample", min=1,
                               help="Log 1 in N statements (MariaDB's log_slow_rate_limit): a busy primary pays "
                                    "about N times less for the window; counts in the digest are of the sample."),
    window: str = typer.Option("slow_log", "--window",
                               help="slow_log (long_query_time=0 for the window), wire (tcpdump of the server's "
                                    "port on its host, dissected by tshark: prepared statements and sessions with "
                                    "their own long_query_time too; needs root or CAP_NET_RAW there), or auto "
                                    "(the one that would miss least, said why)."),
    json_out: bool = typer.Option(False, "--json", help="Print the digest as JSON."),
):
    """Capture a digest: long_query_time=0 for N seconds on a server (settings restored), or digest a slow log."""
    digests.check_window(seconds)
    if window not in ("slow_log", "wire", "auto"):
        raise UsageError(f"--window {window}: choose one of slow_log, wire, auto")
    if window == "auto" and slow_log is None:
        window, why = digests.choose_window(inventory, server)
        if window == "performance_schema":
            window, why = "slow_log", why + " (digest capture reads slow_log or wire: slow_log)"
        if not json_out:
            _progress(why)
    if slow_log is not None:
        d, sentence = digests.digest_file(slow_log, out)
    elif window == "wire":
        result = digests.capture_wire(inventory, server, seconds, out, progress=None if json_out else _progress)
        d, sentence = result.digest, result.sentence()
    else:
        result = digests.capture(inventory, server, seconds, out, saved_settings=saved_settings,
                                     log_file=log_file, sample=sample, progress=None if json_out else _progress)
        d, sentence = result.digest, result.sentence()
        if result.sessions_before and not json_out:
            _progress(f"{result.sessions_before} client session(s) were connected before the window opened: "
                      "their statements are not captured (long_query_time is copied at connect)")
    if json_out:
        print_json(d.to_dict())
        return
    emit(console, digests.digest_table(d, width=console.width))
    console.print(sentence)


@cmd.command("show")
def show(digest_file: Path = typer.Argument(..., help="A digest file (dbmigrate or pt-query-digest JSON)."),
         limit: int = typer.Option(20, "--limit")):
    """Show one digest: classes by share of query time."""
    emit(console, digests.digest_table(digests.load_digest(digest_file), limit, console.width))


@cmd.command("compare")
def compare(
    before: Path = typer.Argument(..., help="Digest before (baseline)."),
    after: Path = typer.Argument(..., help="Digest after."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable comparison."),
    markdown: bool = typer.Option(False, "--markdown", help="A report to paste (tables and overall sentences)."),
    noise_pct: float = typer.Option(10.0, "--noise-pct", help="Hide latency changes under this percentage."),
    noise_us: float = typer.Option(50.0, "--noise-us", help="Hide latency changes under this many microseconds."),
    limit: int = typer.Option(30, "--limit", help="Classes shown (JSON has them all)."),
):
    """Compare two digests per query class and overall (▲ worse, ▼ better)."""
    if json_out and markdown:
        raise UsageError("choose one of --json and --markdown")
    cmp = digests.compare_files(before, after, noise_pct, noise_us)
    if json_out:
        print_json(digests.comparison_json(cmp))
    elif markdown:
        typer.echo(digests.comparison_markdown(cmp, limit), nl=False)
    else:
        for part in digests.comparison_renderable(cmp, limit, width=console.width).renderables:
            emit(console, part)


@cmd.command("evaluate")
def evaluate(
    policy_file: Path = typer.Option(..., "--policy", help="Guard policy (YAML/JSON; a playbook's guard: section works)."),
    baseline: Path = typer.Argument(..., help="Digest before the cutover."),
    current: Path = typer.Argument(..., help="Digest of the guard window."),
    json_out: bool = typer.Option(False, "--json"),
):
    """What the latency guard would decide for these two digests (exit 3 when it would roll back)."""
    decision = digests.evaluate_files(policy_file, baseline, current)
    if json_out:
        print_json({"rollback": decision.rollback, "insufficient": decision.insufficient,
                    "reasons": decision.reasons, "numbers": decision.numbers})
    else:
        console.print(digests.decision_text(decision))
    if decision.rollback:
        raise CommandFailed(3, "the policy calls for a rollback: " + "; ".join(map(str, decision.reasons)),
                            hint="compare the digests (dbmigrate digest compare) to see which queries regressed")


@cmd.command("restore")
def restore(
    inventory: Path = typer.Option(..., "--inventory", "-i", help="Inventory file."),
    server: str = typer.Option(..., "--server", "-s", help="Server the window was opened on."),
    from_file: Path = typer.Option(..., "--from-file", help="The .saved-settings.json written when the window opened."),
    force: bool = typer.Option(False, "--force", help="Apply even if the file says it was already restored."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the statements, change nothing."),
):
    """Put back the slow-log settings saved before a capture window (after a crash of the tool)."""
    name, changed, planned = digests.restore_from_file(inventory, server, from_file, force=force, dry_run=dry_run)
    if dry_run:
        for sql in planned:
            console.print(sql, highlight=False)
        return
    if changed:
        console.print(f"[green]restored on {name}:[/] " + "; ".join(changed), highlight=False)
    else:
        console.print(f"{name} already had the saved settings; nothing changed")
