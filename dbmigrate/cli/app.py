"""Kept for console scripts installed before the entry point was named cli/main.py."""

from dbmigrate.cli.main import main  # noqa: F401
