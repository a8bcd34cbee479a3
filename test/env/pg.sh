#!/usr/bin/env bash
# Throwaway Postgres cluster for walrelay's tests (Debian `postgresql`, major 15).
#
#   pg.sh start              init (first time) and start; idempotent; waits for pg_isready
#   pg.sh stop               fast shutdown; no-op when not running
#   pg.sh restart-immediate  pg_ctl restart -m immediate (crash + recovery), waits until ready
#   pg.sh kill               pg_ctl stop -m immediate (crash, stays down)
#   pg.sh status             exit 0 when running, 3 when not
#   pg.sh env                print `export ...` lines (eval "$(test/env/pg.sh env)")
#   pg.sh psql [ARGS...]     psql against the cluster as user postgres
#
# Environment:
#   WALRELAY_TEST_DIR           state root (default /tmp/walrelay-test); the cluster lives in ./pg
#   WALRELAY_TEST_PG_PORT       port on 127.0.0.1 (default: the port of the last start in this
#                               state dir, else 55432, or a free one when 55432 is taken)
#   WALRELAY_TEST_PG_WAL_LEVEL  wal_level (default logical; `replica` for negative tests)
#   WALRELAY_TEST_PGBIN         server binaries (default /usr/lib/postgresql/15/bin)
#
# pg_ctl and initdb refuse to run as root; as root every server-side command runs as the
# `postgres` user, which owns the data directory. A second cluster needs its own
# WALRELAY_TEST_DIR and WALRELAY_TEST_PG_PORT.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=pg

PG_WAL_LEVEL="${WALRELAY_TEST_PG_WAL_LEVEL:-logical}"
PG_STATE="$(abs_path "$WALRELAY_TEST_DIR")/pg"
# The port: WALRELAY_TEST_PG_PORT, else the one this state dir's cluster was last started on
# (./pg/port), else 55432, or a free port when 55432 is taken at the first start.
PG_PORT_FILE="$PG_STATE/port"
PG_PORT_GIVEN="${WALRELAY_TEST_PG_PORT:-$(cat "$PG_PORT_FILE" 2>/dev/null || true)}"
PG_PORT="${PG_PORT_GIVEN:-55432}"
PGDATA_DIR="$PG_STATE/data"
PG_SOCK="$PG_STATE/sock"
PG_LOG="$PG_STATE/postgres.log"

find_pgbin() {
	if [ -n "${WALRELAY_TEST_PGBIN:-}" ]; then
		printf '%s\n' "$WALRELAY_TEST_PGBIN"
		return
	fi
	if [ -x /usr/lib/postgresql/15/bin/initdb ]; then
		printf '%s\n' /usr/lib/postgresql/15/bin
		return
	fi
	# Another major (a newer Debian) works the same way; take the newest installed.
	local d
	d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
	printf '%s\n' "${d:-/usr/lib/postgresql/15/bin}"
}
PGBIN="$(find_pgbin)"

# as_pg CMD...: run CMD as the cluster owner (postgres when we are root), from a directory it can read.
as_pg() {
	if is_root; then
		(cd "$PG_STATE" && runuser -u postgres -- "$@")
	else
		(cd "$PG_STATE" && "$@")
	fi
}

pg_ctl_() { as_pg "$PGBIN/pg_ctl" -D "$PGDATA_DIR" "$@"; }

running() {
	[ -f "$PGDATA_DIR/PG_VERSION" ] || return 1
	pg_ctl_ status >/dev/null 2>&1
}

# The postgres user must be able to reach the state dir. t.TempDir() and mktemp -d make 0700
# directories owned by root; under /tmp we add the search bit (a+x, not read) to such parents.
ensure_reachable() {
	is_root || return 0
	local d="$PG_STATE"
	while [ "$d" != "/" ]; do
		d="$(dirname "$d")"
		if ! runuser -u postgres -- test -x "$d" 2>/dev/null; then
			case "$d" in
			/tmp/*) chmod a+x "$d" ;;
			*) die "user postgres cannot reach $d; use a WALRELAY_TEST_DIR under /tmp" ;;
			esac
		fi
	done
}

write_conf() {
	cat >"$PGDATA_DIR/walrelay.conf" <<EOF
# Written by test/env/pg.sh on every start; edits are lost.
port = $PG_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG_SOCK'
wal_level = $PG_WAL_LEVEL
max_replication_slots = 20
max_wal_senders = 20
wal_sender_timeout = 60s
max_connections = 200
# Speed over durability for a throwaway cluster. synchronous_commit stays at its default (on).
fsync = off
timezone = 'UTC'
log_timezone = 'UTC'
log_line_prefix = '%m [%p] %q%a '
log_replication_commands = on
EOF
	cat >"$PGDATA_DIR/pg_hba.conf" <<'EOF'
# Written by test/env/pg.sh: trust on loopback only, except for members of
# walrelay_password_auth (test/harden_pg_test.go: a wrong password must fail).
host    all          +walrelay_password_auth  127.0.0.1/32  scram-sha-256
local   all          all                 trust
local   replication  all                 trust
host    all          all  127.0.0.1/32   trust
host    replication  all  127.0.0.1/32   trust
EOF
	if is_root; then chown postgres: "$PGDATA_DIR/walrelay.conf" "$PGDATA_DIR/pg_hba.conf"; fi
	if ! grep -q "^include_if_exists = 'walrelay.conf'" "$PGDATA_DIR/postgresql.conf"; then
		printf "\ninclude_if_exists = 'walrelay.conf'\n" >>"$PGDATA_DIR/postgresql.conf"
	fi
}

init_cluster() {
	[ -x "$PGBIN/initdb" ] || die "no initdb in $PGBIN (run test/env/deps.sh, or set WALRELAY_TEST_PGBIN)"
	ensure_state_dir "$WALRELAY_TEST_DIR"
	mkdir -p "$PG_STATE" "$PG_SOCK"
	ensure_reachable
	if is_root; then chown postgres: "$PG_STATE" "$PG_SOCK"; fi
	if [ ! -f "$PGDATA_DIR/PG_VERSION" ]; then
		log "initdb $PGDATA_DIR"
		rm -rf "$PGDATA_DIR"
		as_pg "$PGBIN/initdb" -D "$PGDATA_DIR" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
			--no-instructions >"$PG_STATE/initdb.log" 2>&1 ||
			{ cat "$PG_STATE/initdb.log" >&2; die "initdb failed"; }
	fi
	[ "${#PG_SOCK}" -lt 90 ] || die "socket dir path too long for a unix socket: $PG_SOCK"
}

wait_ready() {
	local deadline=$((SECONDS + ${1:-60}))
	until "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 30 "$PG_LOG" >&2 || true
			die "postgres on 127.0.0.1:$PG_PORT not ready"
		fi
		sleep 0.2
	done
}

cmd_start() {
	if running; then
		wait_ready 60
		log "already running on 127.0.0.1:$PG_PORT ($PGDATA_DIR)"
		return
	fi
	if [ -z "$PG_PORT_GIVEN" ]; then
		local free
		free="$(pick_port "$PG_PORT" 1)" || die "port $PG_PORT is taken and no free port found"
		if [ "$free" != "$PG_PORT" ]; then
			log "port $PG_PORT is taken; using $free"
			PG_PORT="$free"
		fi
	fi
	init_cluster
	printf '%s\n' "$PG_PORT" >"$PG_PORT_FILE"
	write_conf
	register pg
	log "starting on 127.0.0.1:$PG_PORT wal_level=$PG_WAL_LEVEL"
	if ! pg_ctl_ -l "$PG_LOG" -w -t 60 start >/dev/null; then
		tail -n 30 "$PG_LOG" >&2 || true
		die "pg_ctl start failed (log: $PG_LOG)"
	fi
	wait_ready 60
	log "ready: $(dsn)"
}

cmd_stop() {
	if ! running; then
		log "not running"
		return
	fi
	log "stopping"
	pg_ctl_ -m fast -w -t 60 stop >/dev/null || pg_ctl_ -m immediate -w -t 30 stop >/dev/null
}

cmd_kill() {
	if running; then
		log "immediate shutdown (crash)"
		pg_ctl_ -m immediate -w -t 30 stop >/dev/null
	fi
}

cmd_restart_immediate() {
	[ -f "$PGDATA_DIR/PG_VERSION" ] || die "no cluster in $PGDATA_DIR; run start first"
	write_conf
	log "restart -m immediate"
	if ! pg_ctl_ -m immediate -l "$PG_LOG" -w -t 60 restart >/dev/null; then
		tail -n 30 "$PG_LOG" >&2 || true
		die "pg_ctl restart failed (log: $PG_LOG)"
	fi
	wait_ready 60
}

cmd_status() {
	if running; then
		echo "postgres running on 127.0.0.1:$PG_PORT (data $PGDATA_DIR)"
	else
		echo "postgres not running (data $PGDATA_DIR)"
		return 3
	fi
}

dsn() { printf 'postgres://postgres@127.0.0.1:%s/postgres?sslmode=disable\n' "$PG_PORT"; }

cmd_env() {
	emit_export WALRELAY_TEST_DIR "$(abs_path "$WALRELAY_TEST_DIR")"
	emit_export WALRELAY_TEST_PG_PORT "$PG_PORT"
	emit_export WALRELAY_TEST_PG_DSN "$(dsn)"
	emit_export WALRELAY_TEST_PGDATA "$PGDATA_DIR"
	emit_export WALRELAY_TEST_PGBIN "$PGBIN"
	emit_export WALRELAY_TEST_PG_LOG "$PG_LOG"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
kill) cmd_kill ;;
restart-immediate) cmd_restart_immediate ;;
status) cmd_status ;;
env) cmd_env ;;
psql)
	shift
	exec "$PGBIN/psql" -X -v ON_ERROR_STOP=1 "$(dsn)" "$@"
	;;
*)
	echo "usage: $0 start|stop|restart-immediate|kill|status|env|psql [args]" >&2
	exit 2
	;;
esac
