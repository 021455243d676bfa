"""Shape capture's pure parts: literals redacted, column statistics without values, no secrets."""

from __future__ import annotations

from dbmigrate.db.shape_reader import without_secrets
from dbmigrate.shape.capture import column_stats, redact_literals


def test_literals_are_redacted_and_identifiers_kept():
    s = "SELECT id FROM t1 USE INDEX (ix_2) WHERE name = 'O''Brien' AND qty > 42 AND `col9` = \"x\" AND f = 1.5e3"
    assert redact_literals(s) == ("SELECT id FROM t1 USE INDEX (ix_2) WHERE name = '?' AND qty > 0 AND `col9` = '?' "
                                  "AND f = 0")


def test_column_statistics_keep_ranges_of_numbers_and_only_lengths_of_strings():
    st = column_stats(["id", "name", "blob"], [(1, "ab", b"xyz"), (5, None, b"x"), (3, "abcd", b"")])
    assert st["id"] == {"sampled": 3, "null_share": 0.0, "distinct_share": 1.0, "min": 1, "max": 5}
    assert st["name"]["null_share"] == round(1 / 3, 4) and st["name"]["max_len"] == 4 and "min" not in st["name"]
    assert st["blob"]["avg_len"] == round(4 / 3, 1)


def test_grants_lose_their_secrets():
    line = "GRANT USAGE ON *.* TO `app`@`%` IDENTIFIED BY PASSWORD '*0123456789ABCDEF0123456789ABCDEF01234567'"
    assert without_secrets(line) == "GRANT USAGE ON *.* TO `app`@`%` IDENTIFIED BY PASSWORD '<redacted>'"
    assert without_secrets("GRANT SELECT ON `ca`.* TO `x`@`%`") == "GRANT SELECT ON `ca`.* TO `x`@`%`"



def test_hex_literals_of_blobs_are_redacted():
    assert redact_literals("INSERT INTO t (der) VALUES (x'0a0b', 0xCAFE)") == "INSERT INTO t (der) VALUES ('?', '?')"


def test_column_statistics_keep_date_ranges_for_range_partitions():
    import datetime

    st = column_stats(["issued"], [(datetime.date(2024, 5, 1),), (datetime.date(2025, 2, 1),)])
    assert st["issued"]["min"] == "2024-05-01" and st["issued"]["max"] == "2025-02-01"
