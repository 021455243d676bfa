#!/bin/sh
# The official mariadb image's start-up conventions on Debian's package: flags as the command,
# a new datadir initialised once, root's password from MARIADB_ROOT_PASSWORD for root@localhost
# and root@MARIADB_ROOT_HOST. Initialisation runs with the binary log off, so a new server holds
# no GTID of its own and can join any replication topology.
set -eu
if [ "${1#-}" != "$1" ]; then set -- mariadbd "$@"; fi
if [ "$1" != mariadbd ] && [ "$1" != mysqld ]; then exec "$@"; fi
prog=$1; shift
datadir=/var/lib/mysql
if [ ! -d "$datadir/mysql" ]; then
    : "${MARIADB_ROOT_PASSWORD:?set MARIADB_ROOT_PASSWORD}"
    mariadb-install-db --user=mysql --datadir="$datadir" --auth-root-authentication-method=normal \
        --skip-test-db --skip-name-resolve >/dev/null
    sock=/run/mysqld/init.sock
    mariadbd --user=mysql --datadir="$datadir" --skip-networking --skip-log-bin --socket="$sock" \
        --pid-file=/run/mysqld/init.pid &
    pid=$!
    i=0
    until mariadb-admin --socket="$sock" ping >/dev/null 2>&1; do
        i=$((i + 1))
        if [ "$i" -ge 600 ] || ! kill -0 "$pid" 2>/dev/null; then echo "initialisation server did not start" >&2; exit 1; fi
        sleep 0.1
    done
    quote() { printf %s "$1" | sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g"; }
    pw=$(quote "$MARIADB_ROOT_PASSWORD")
    host=$(quote "${MARIADB_ROOT_HOST:-%}")
    {
        # Only root@localhost and root@MARIADB_ROOT_HOST remain, as in the official image. printf,
        # not echo: dash's echo would interpret backslashes in the password.
        printf '%s\n' "SET sql_log_bin=0;" \
            "DROP USER IF EXISTS 'root'@'127.0.0.1', 'root'@'::1';" \
            "EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS root@''', @@hostname, '''');" \
            "ALTER USER 'root'@'localhost' IDENTIFIED BY '$pw';"
        if [ "$host" != localhost ]; then
            printf '%s\n' "CREATE USER 'root'@'$host' IDENTIFIED BY '$pw';" \
                "GRANT ALL PRIVILEGES ON *.* TO 'root'@'$host' WITH GRANT OPTION;" \
                "GRANT PROXY ON ''@'%' TO 'root'@'$host' WITH GRANT OPTION;"
        fi
    } | mariadb --socket="$sock" -uroot
    kill "$pid"
    wait "$pid" || true
    echo "initialised $datadir"
fi
exec "$prog" --user=mysql "$@"
