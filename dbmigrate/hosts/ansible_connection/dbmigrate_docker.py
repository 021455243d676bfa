"""Ansible connection plugin `dbmigrate_docker`: tasks run in a container through `docker exec`.

The same way into a container as the host layer's `docker` access kind (hosts/docker.py),
for the playbook `consolidate provision` generates: ansible-core ships no Docker connection
and none can be installed where no collection server is reachable, so this one is loaded by
path (`run_playbook` names this directory in ANSIBLE_CONNECTION_PLUGINS). The container
runs as root: nothing is become. The container needs a python3 for Ansible's modules.
"""

from __future__ import annotations

DOCUMENTATION = """
    name: dbmigrate_docker
    short_description: run tasks in a running container through docker exec
    description:
        - Commands run with `docker exec -i CONTAINER /bin/sh -c CMD`; files are copied in and out
          through the same exec (cat), so only the Docker CLI is needed on the controller.
    options:
        remote_addr:
            description: The container's name.
            default: inventory_hostname
            vars:
                - name: inventory_hostname
                - name: ansible_host
                - name: ansible_docker_container
        engine:
            description: The Docker Engine's address (unix:///path/docker.sock, tcp://...); default DOCKER_HOST.
            default: ''
            vars:
                - name: ansible_docker_engine
        docker:
            description: The Docker CLI.
            default: docker
            vars:
                - name: ansible_docker_cli
    extends_documentation_fragment:
        - connection_pipelining
"""

import shlex
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase

TIMEOUT_S = 900


class Connection(ConnectionBase):
    transport = "dbmigrate_docker"
    has_pipelining = True

    def _argv(self, *args: str) -> list[str]:
        argv = [self.get_option("docker")]
        if self.get_option("engine"):
            argv += ["-H", self.get_option("engine")]
        return [*argv, "exec", "-i", self.get_option("remote_addr"), *args]

    def _run(self, argv: list[str], stdin: bytes | None) -> subprocess.CompletedProcess:
        try:
            res = subprocess.run(argv, input=stdin or b"", capture_output=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise AnsibleConnectionFailure(f"docker exec into {self.get_option('remote_addr')} failed: {e}")
        low = res.stderr.lower()
        if res.returncode == 125 or b"no such container" in low or b"is not running" in low \
                or b"cannot connect to the docker daemon" in low:
            raise AnsibleConnectionFailure(f"docker exec into {self.get_option('remote_addr')}: "
                                           f"{to_text(res.stderr).strip()[-300:]}")
        return res

    def _connect(self) -> "Connection":
        self._connected = True
        return self

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = True):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        res = self._run(self._argv("/bin/sh", "-c", to_text(cmd)), in_data)
        return res.returncode, res.stdout, res.stderr

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        try:
            with open(to_bytes(in_path), "rb") as f:
                data = f.read()
        except OSError:
            raise AnsibleFileNotFound(f"file to copy into the container not found: {in_path}")
        res = self._run(self._argv("/bin/sh", "-c", f"cat > {shlex.quote(out_path)}"), data)
        if res.returncode != 0:
            raise AnsibleError(f"copying to {out_path} in {self.get_option('remote_addr')} failed: "
                               f"{to_text(res.stderr).strip()[-300:]}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        res = self._run(self._argv("cat", in_path), None)
        if res.returncode != 0:
            raise AnsibleError(f"reading {in_path} in {self.get_option('remote_addr')} failed: "
                               f"{to_text(res.stderr).strip()[-300:]}")
        with open(to_bytes(out_path), "wb") as f:
            f.write(res.stdout)

    def close(self) -> None:
        self._connected = False
