#!/bin/sh
# Healthy once the server accepts connections on its socket. Takes the official image's
# options (--connect, --innodb_initialized): the server listens only after InnoDB started.
# `mariadb-admin ping` succeeds even when the login is refused: it needs no password.
exec mariadb-admin --socket=/run/mysqld/mysqld.sock --connect-timeout=2 ping >/dev/null 2>&1
