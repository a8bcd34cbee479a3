#!/usr/bin/env bash
# Regenerates decoder/testdata/capture/pg15.pgo with a throwaway Postgres 15
# (data dir /tmp/decoder-capture-pg, port 55499, 127.0.0.1 only), which is
# stopped and deleted afterwards. Run from anywhere, as root (initdb runs as
# the postgres user). Needs the Debian postgresql-15 packages.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # repository root
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
DIR=${DIR:-/tmp/decoder-capture-pg}
PORT=${PORT:-55499}

cleanup() {
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$DIR"
}
trap cleanup EXIT
cleanup
mkdir -p "$DIR"
chown postgres: "$DIR"
runuser -u postgres -- "$PGBIN/initdb" -D "$DIR/data" -U postgres --auth=trust >/dev/null
cat >>"$DIR/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR'
wal_level = logical
max_replication_slots = 4
max_wal_senders = 4
timezone = 'Asia/Kolkata'
fsync = off
CONF
# initdb --auth=trust already trusts local and host connections, replication included.
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w start >/dev/null
go run ./decoder/internal/capture -dsn "host=127.0.0.1 port=$PORT user=postgres dbname=postgres sslmode=disable" \
	-out decoder/testdata/capture/pg15.pgo
