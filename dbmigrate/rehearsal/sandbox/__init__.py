"""Local sandbox: real MariaDB processes on 127.0.0.1, each with its own port,
datadir, config, socket and pid file. The embedded default for tests and rehearsals."""
