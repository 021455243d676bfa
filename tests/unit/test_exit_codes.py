"""A finished run's exit code tells scripts what happened without parsing words."""

from dbmigrate.app.errors import PAUSED, REFUSED, exit_code_of_run


def test_a_refusal_a_rollback_and_a_pause_each_have_their_own_exit_code():
    assert exit_code_of_run("done") == 0
    assert exit_code_of_run("refused") == REFUSED == 5  # nothing changed
    assert exit_code_of_run("rolled_back") == 1  # something changed and was undone
    assert exit_code_of_run("rollback_failed") == 1
    assert exit_code_of_run("failed") == 1
    assert exit_code_of_run("paused") == PAUSED == 4
    assert len({exit_code_of_run(s) for s in ("done", "refused", "rolled_back", "paused")}) == 4
