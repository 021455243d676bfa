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
    monkeypatch.delenv("DBM_PW_NEVER_SET", raising=False)
    with pytest.raises(CredentialsError, match="DBM_PW_NEVER_SET is not set"):
        c.from_environment("", "DBM_PW_NEVER_SET", user="app")


def test_private_defaults_file_is_0600_and_removed():
    creds = c.Credentials("u", "topsecret-xyz")
    with c.private_defaults_file(creds, "127.0.0.1", 3307) as path:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == 0o600
        text = open(path).read()
        assert c.parse_option_file(path)["client"]["password"] == "topsecret-xyz" and "port=3307" in text
    assert not os.path.exists(path)


def test_redaction():
    register_secret("hunter2-long")
    assert "hunter2" not in redact("connect with hunter2-long now")
    assert redact("CHANGE MASTER TO MASTER_USER='r', MASTER_PASSWORD='abc'") == \
        "CHANGE MASTER TO MASTER_USER='r', MASTER_PASSWORD='***'"
    assert "xyz" not in redact("CREATE USER a IDENTIFIED BY 'xyz'")
    assert "pw1" not in redact("password=pw1 host=h")


ODD_PASSWORDS = ['a"b', "back\\slash", "two\nlines\nhost=evil.example", "hash#not-a-comment", " spaced ",
                 "quote'single", "tab\there", "ends with \\", 'mix \\"\'#\r\n\b']


@pytest.mark.parametrize("password", ODD_PASSWORDS)
def test_private_defaults_file_reads_back_exactly_and_injects_nothing(password, tmp_path):
    creds = c.Credentials("u", password)
    with c.private_defaults_file(creds, "127.0.0.1", 3307) as path:
        groups = c.parse_option_file(path)
    assert groups["client"]["password"] == password
    assert groups["client"]["host"] == "127.0.0.1"  # an injected host= line would have replaced it
    assert set(groups) == {"client"} and set(groups["client"]) == {"user", "password", "host", "port"}


def test_option_file_parsing_follows_the_client_rules(tmp_path):
    f = tmp_path / "my.cnf"
    f.write_text('[client]  # trailing comment\nuser=u # comment\npassword="p#1\\"x"  # c\nssl-ca=\'/a b\'\n')
    creds = c.from_option_file(f)
    assert (creds.user, creds.password, creds.ssl_ca) == ("u", 'p#1"x', "/a b")


def test_world_writable_option_file_is_refused(tmp_path):
    f = tmp_path / "my.cnf"
    f.write_text("[client]\nuser=u\npassword=p\n")
    os.chmod(f, 0o666)
    with pytest.raises(CredentialsError, match="world-writable") as e:
        c.from_option_file(f)
    assert e.value.exit_code == 2 and f"chmod 600 {f}" in e.value.hint
    os.chmod(f, 0o644)
    assert c.from_option_file(f).user == "u"


def test_option_file_that_is_a_directory_is_one_line(tmp_path):
    with pytest.raises(CredentialsError, match="is a directory"):
        c.from_option_file(tmp_path)


def test_password_env_does_not_reach_child_programs(monkeypatch):
    import subprocess

    monkeypatch.setenv("DBM_CHILD_PW", "child-secret-987")
    assert c.from_environment("", "DBM_CHILD_PW", user="app").password == "child-secret-987"
    child_env = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
    assert "DBM_CHILD_PW" not in child_env and "child-secret-987" not in child_env
    # resolved again later (resume, a second server): the same secret
    assert c.from_environment("", "DBM_CHILD_PW", user="app").password == "child-secret-987"


def test_native_password_hash_matches_the_server():
    # SELECT PASSWORD('a"b\\c#d e\nhost=x') on MariaDB 10.11
    assert c.native_password_hash('a"b\\c#d e\nhost=x') == "*096226DBAC6CAC46FE284E79BBCA1F0DDCB59C08"


def test_remove_private_files_clears_live_defaults_files():
    with c.private_defaults_file(c.Credentials("u", "pw-live-1")) as path:
        c.remove_private_files()
        assert not os.path.exists(path)
