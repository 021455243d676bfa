import os
import stat

import pytest

from dbmigrate.db import credentials as c
from dbmigrate.exceptions import CredentialsError
from dbmigrate.redact import redact, register_secret


def test_option_file_groups_and_include(tmp_path):
    (tmp_path / "extra.cnf").write_text("[client-admin]\nssl-ca=/etc/ca.pem\n")
    f = tmp_path / "my.cnf"
    f.write_text("# comment\n[client]\nuser=base\npassword=basepw\n\n[client-admin]\nuser = admin\n"
                 "password = 'adm pw'\n!include extra.cnf\n")
    creds = c.from_option_file(f, "client-admin")
    assert (creds.user, creds.password, creds.ssl_ca) == ("admin", "adm pw", "/etc/ca.pem")
    assert c.from_option_file(f).user == "base"


def test_missing_group_and_file(tmp_path):
    f = tmp_path / "my.cnf"
    f.write_text("[client]\nuser=u\n")
    with pytest.raises(CredentialsError, match=r"has no \[nope\] group"):
        c.from_option_file(f, "nope")
    with pytest.raises(CredentialsError, match="does not exist"):
        c.from_option_file(tmp_path / "absent.cnf")


def test_environment(monkeypatch):
    monkeypatch.setenv("DBM_PW", "from-env-123")
    creds = c.from_environment("", "DBM_PW", user="app")
    assert creds.password == "from-env-123"
    monkeypatch.delenv("DBM_PW")
    with pytest.raises(CredentialsError, match="DBM_PW is not set"):
        c.from_environment("", "DBM_PW", user="app")


def test_private_defaults_file_is_0600_and_removed():
    creds = c.Credentials("u", "topsecret-xyz")
    with c.private_defaults_file(creds, "127.0.0.1", 3307) as path:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == 0o600
        text = open(path).read()
        assert 'password="topsecret-xyz"' in text and "port=3307" in text
    assert not os.path.exists(path)


def test_redaction():
    register_secret("hunter2-long")
    assert "hunter2" not in redact("connect with hunter2-long now")
    assert redact("CHANGE MASTER TO MASTER_USER='r', MASTER_PASSWORD='abc'") == \
        "CHANGE MASTER TO MASTER_USER='r', MASTER_PASSWORD='***'"
    assert "xyz" not in redact("CREATE USER a IDENTIFIED BY 'xyz'")
    assert "pw1" not in redact("password=pw1 host=h")
