"""The `dbmigrate` command's entry point. It imports only what the command asked for needs:
`--version` loads nothing, `dbmigrate run` loads the run's modules and no others."""

from __future__ import annotations

import os
import signal
import sys


def __getattr__(name: str):
    """`app`: the whole application (all commands), built on first use (tests, documentation)."""
    if name == "app":
        from dbmigrate.cli.root import build

        globals()["app"] = built = build()
        return built
    raise AttributeError(name)


def _stop_on(signum: int, _frame) -> None:
    """SIGTERM/SIGHUP: remove the private defaults files (they hold passwords) at once,
    then unwind like Ctrl-C so that children are killed and `finally` blocks run."""
    from dbmigrate.app.errors import Terminated
    from dbmigrate.app.paths import remove_secret_files

    remove_secret_files()
    raise Terminated(signum, signal.Signals(signum).name)


def main() -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on)
    argv = sys.argv[1:]
    if argv == ["--version"]:  # nothing else to load
        from dbmigrate import version_line

        print(version_line())
        return
    if next((a for a in argv if not a.startswith("-")), None) in ("run", "resume"):
        from dbmigrate.app.startup import yield_cores_until_the_fence

        yield_cores_until_the_fence()
    # No pydantic plugins are used: skip their discovery, a scan of every installed package's metadata.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from dbmigrate.app.errors import failure_of
    from dbmigrate.cli import common
    from dbmigrate.cli.root import build, command_of, run_under_json

    try:
        command = command_of(argv)
        app = build([command] if command else None)  # unknown or none: all of them, for help and errors
        if "--json" in argv:
            sys.exit(run_under_json(app))
        app()
    except (Exception, KeyboardInterrupt) as exc:
        # Errors raised outside a command (option callbacks, registration) meet the same boundary.
        failure = failure_of(exc)
        if failure is None or common.state["debug"]:
            raise
        common.show_failure(failure)
        sys.exit(failure.exit_code)
