"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from dbmigrate.engine.journal import Journal


@pytest.fixture
def journal(tmp_path):
    """An empty run journal of its own, on disk as the tool keeps it."""
    with Journal(tmp_path / "journal.sqlite") as j:
        yield j
