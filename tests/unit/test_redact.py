"""The one redactor masks every password shape, wherever the text is going."""

from __future__ import annotations

import pytest

from dbmigrate.redact import redact, redact_json, register_secret

CASES = [
    ("CREATE USER 'app'@'%' IDENTIFIED BY 's3cret!'", "s3cret!"),
    ("CREATE USER `app`@`%` IDENTIFIED BY PASSWORD '*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19'",
     "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"),
    ("CREATE USER 'app'@'%' IDENTIFIED WITH 'mysql_native_password' AS '*94BDCEBE19083CE2A1F959FD02F964C7AF4CFC29'",
     "*94BDCEBE19083CE2A1F959FD02F964C7AF4CFC29"),
    ("CREATE USER app IDENTIFIED VIA ed25519 USING PASSWORD('tops3cret')", "tops3cret"),
    ("CHANGE MASTER TO MASTER_HOST='h', MASTER_PASSWORD='replpw', MASTER_USE_GTID=slave_pos", "replpw"),
    ("CHANGE REPLICATION SOURCE TO SOURCE_PASSWORD = \"replpw2\"", "replpw2"),
    ("SET PASSWORD FOR 'app'@'%' = PASSWORD('newpw')", "newpw"),
    ("orchestrator at http://admin:hunter22@orc.example:3000/api", "hunter22"),
    ("dsn host=db1 user=app pwd=letmein port=3306", "letmein"),
    ("--password=cli-secret", "cli-secret"),
    ('{"password": "json-secret"}', "json-secret"),
    ("[client]\npassword=opt-secret\n", "opt-secret"),
]


@pytest.mark.parametrize("text, secret", CASES, ids=[c[0][:30] for c in CASES])
def test_password_shapes_are_masked(text, secret):
    out = redact(text)
    assert secret not in out
    assert "***" in out


def test_registered_values_are_masked_anywhere():
    register_secret("Zq9-unusual-value")
    assert redact("login failed for Zq9-unusual-value at db1") == "login failed for *** at db1"


def test_a_short_registered_value_is_masked_only_as_a_word():
    register_secret("q7")
    assert redact("key q7 used; q7x and aq7 stay") == "key *** used; q7x and aq7 stay"


def test_json_values_are_masked_at_every_depth():
    value = {"steps": [{"sql": "CREATE USER x IDENTIFIED BY 'deep-secret'"}], "n": 3}
    out = redact_json(value)
    assert "deep-secret" not in str(out) and out["n"] == 3


def test_plain_text_is_left_alone():
    text = "fenced db1 (read_only=ON) in 1.2 ms; final position 0-1-42"
    assert redact(text) == text
