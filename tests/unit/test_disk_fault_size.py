"""The disk-full row's small filesystem holds the candidate's datadir as it is now, with the same
headroom beside it whatever earlier rows left there."""

from __future__ import annotations

from pathlib import Path

from dbmigrate.rehearsal.faultmatrix.disk import size_for


def test_the_tmpfs_is_the_datadirs_files_plus_the_headroom(tmp_path: Path) -> None:
    (tmp_path / "ibdata1").write_bytes(b"x" * (3 << 20))
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "t.ibd").write_bytes(b"x" * ((1 << 20) + 1))  # a partial MB counts as one
    assert size_for(tmp_path, 1280) == 1280 + 5


def test_a_datadir_grown_by_earlier_rows_keeps_its_headroom(tmp_path: Path) -> None:
    small = size_for(tmp_path, 1280)
    (tmp_path / "relay-bin.000042").write_bytes(b"x" * (40 << 20))
    assert size_for(tmp_path, 1280) - small == 40
