#!/usr/bin/env bash
# Throwaway Postgres cluster for walrelay's tests (Debian's 15 by default; 14, 16, 17 and 18
# from Maven Central through pgversions.sh).
#
#   pg.sh start              init (first time) and start; idempotent; waits for pg_isready
#   pg.sh stop               fast shutdown; no-op when not running
#   pg.sh restart-immediate  pg_ctl restart -m immediate (crash + recovery), waits until ready
#   pg.sh kill               pg_ctl stop -m immediate (crash, stays down)
#   pg.sh kill9              SIGKILL to the postmaster and every process it started (a lost
#                            node: no shutdown, no goodbye to clients), waits until all are
#                            gone; `start` later runs crash recovery
#   pg.sh status             exit 0 when running, 3 when not
#   pg.sh env                print `export ...` lines (eval "$(test/env/pg.sh env)")
#   pg.sh psql [ARGS...]     psql against the cluster as user postgres
#   pg.sh standby-create [--no-start] DIR PORT [SLOT]
#                            a physical streaming standby of this (running) cluster in state
#                            dir DIR (its cluster in DIR/pg, like WALRELAY_TEST_DIR=DIR) on
#                            PORT, started unless --no-start; see "Standbys" below
#   pg.sh promote            promote this cluster (a standby) and wait until it accepts writes
#
# Environment:
#   WALRELAY_TEST_DIR           state root (default /tmp/walrelay-test); the cluster lives in ./pg
#   WALRELAY_TEST_PG_PORT       port on 127.0.0.1 (default: the port of the last start in this
#                               state dir, else 55432, or a free one when 55432 is taken)
#   WALRELAY_TEST_PG_WAL_LEVEL  wal_level (default logical; `replica` for negative tests)
#   WALRELAY_TEST_PG_VERSION    major to run: 15 (Debian's), or 14, 16, 17, 18 (installed on
#                               demand by pgversions.sh), or a full version such as 17.5.0
#   WALRELAY_TEST_PGBIN         server binaries when WALRELAY_TEST_PG_VERSION is not set
#                               (default: the ones this state dir's cluster was started with,
#                               else /usr/lib/postgresql/15/bin)
#
# pg_ctl and initdb refuse to run as root; as root every server-side command runs as the
# `postgres` user, which owns the data directory. A second cluster needs its own
# WALRELAY_TEST_DIR and WALRELAY_TEST_PG_PORT.
#
# Standbys (for failover tests). standby-create copies the running cluster without
# pg_basebackup (the Maven builds have none): it creates the physical slot SLOT (default
# standby_PORT) on this cluster, copies the data directory between pg_backup_start and
# pg_backup_stop (pg_start_backup/pg_stop_backup on 14) with psql, writes backup_label, then
# copies pg_wal, so the copy also holds the WAL older than the backup (what slots copied into
# it later need); replication slots are not copied (like pg_basebackup). The copy gets
# standby.signal and, in its postgresql.auto.conf (like pg_basebackup -R):
#   primary_conninfo (with dbname=, for slot synchronization), primary_slot_name = SLOT,
#   hot_standby_feedback = on, and on 17+ sync_replication_slots = on and
#   synchronized_standby_slots = '' (a promoted standby must not wait for a slot nobody reads).
# On 17+ this cluster gets SLOT added to synchronized_standby_slots (ALTER SYSTEM + reload):
# logical walsenders of failover slots then wait until the standby has the WAL. The standby is
# then an ordinary cluster of this script: WALRELAY_TEST_DIR=DIR pg.sh stop|kill9|promote|env.
# Failover slots (pg_create_logical_replication_slot(..., failover => true), 17+) appear on
# the standby with synced = true a few seconds after their creation; until then the standby
# logs "could not synchronize replication slot", which is normal.
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

PG_BIN_FILE="$PG_STATE/pgbin"
DEBIAN_PGBIN=/usr/lib/postgresql/15/bin

# find_pgbin: WALRELAY_TEST_PG_VERSION's binaries (installed when missing), else
# WALRELAY_TEST_PGBIN, else the binaries this state dir's cluster was started with
# (./pg/pgbin), else Debian's. The version comes first: `make test PG=17` must not run the 15
# that a WALRELAY_TEST_PGBIN left in the shell by `eval "$(make -s env)"` names.
find_pgbin() {
	if [ -n "${WALRELAY_TEST_PG_VERSION:-}" ]; then
		"$WALRELAY_ENV_DIR/pgversions.sh" bin "$WALRELAY_TEST_PG_VERSION" 8>&- || die "no Postgres $WALRELAY_TEST_PG_VERSION"
		return
	fi
	if [ -n "${WALRELAY_TEST_PGBIN:-}" ]; then
		printf '%s\n' "$WALRELAY_TEST_PGBIN"
		return
	fi
	if [ -s "$PG_BIN_FILE" ]; then
		cat "$PG_BIN_FILE"
		return
	fi
	if [ -x "$DEBIAN_PGBIN/initdb" ]; then
		printf '%s\n' "$DEBIAN_PGBIN"
		return
	fi
	# Another major (a newer Debian) works the same way; take the newest installed.
	local d
	d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
	printf '%s\n' "${d:-$DEBIAN_PGBIN}"
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

# ensure_reachable DIR: the postgres user must be able to reach DIR. t.TempDir() and mktemp -d
# make 0700 directories owned by root; under /tmp we add the search bit (a+x, not read) to such
# parents.
ensure_reachable() {
	is_root || return 0
	local d="$1"
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
# walrelay_password_auth (test/pg_objects_test.go: a wrong password must fail).
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
	ensure_reachable "$PG_STATE"
	if is_root; then chown postgres: "$PG_STATE" "$PG_SOCK"; fi
	if [ ! -f "$PGDATA_DIR/PG_VERSION" ]; then
		log "initdb $PGDATA_DIR"
		rm -rf "$PGDATA_DIR"
		as_pg "$PGBIN/initdb" -D "$PGDATA_DIR" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
			--no-instructions >"$PG_STATE/initdb.log" 2>&1 ||
			{ cat "$PG_STATE/initdb.log" >&2; die "initdb failed"; }
	fi
	[ "${#PG_SOCK}" -lt 90 ] || die "socket dir path too long for a unix socket: $PG_SOCK"
	local have want
	have="$(cat "$PGDATA_DIR/PG_VERSION")"
	want="$(server_major)"
	[ "$have" = "$want" ] || die "$PGDATA_DIR is a Postgres $have cluster, $PGBIN is Postgres $want (another WALRELAY_TEST_DIR, or make clean)"
	printf '%s\n' "$PGBIN" >"$PG_BIN_FILE"
}

# server_major: the major version of $PGBIN's postgres (14, 15, ...).
server_major() {
	local v
	v="$("$PGBIN/postgres" --version)" || die "$PGBIN/postgres does not run"
	v="$(awk '{print $3}' <<<"$v")" # postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)
	printf '%s\n' "${v%%.*}"
}

wait_ready() {
	wait_until "${1:-60}" "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres && return
	tail -n 30 "$PG_LOG" >&2 || true
	die "postgres on 127.0.0.1:$PG_PORT not ready"
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

# postmaster_pid: the running postmaster's pid (first line of postmaster.pid), or nothing.
postmaster_pid() {
	local pid
	pid="$(head -n 1 "$PGDATA_DIR/postmaster.pid" 2>/dev/null || true)"
	if pid_alive "$pid"; then printf '%s\n' "$pid"; fi
}

cmd_kill9() {
	local pm kids pid
	pm="$(postmaster_pid)"
	if [ -z "$pm" ]; then
		log "not running"
		return
	fi
	# Stopped, the postmaster forks nothing more and notices nothing: its children are all
	# known before anything dies.
	kill -STOP "$pm"
	kids="$(ps -o pid= --ppid "$pm" || true)"
	log "kill -9 postmaster $pm and its $(wc -w <<<"$kids") children"
	# shellcheck disable=SC2086 # one pid per word
	kill -KILL "$pm" $kids 2>/dev/null || true
	for pid in $pm $kids; do
		wait_pid_gone "$pid" 30 || die "process $pid survived SIGKILL"
	done
	# Until its parent reaps it, the dead postmaster is a zombie that pg_ctl (and a new
	# postmaster) take for a running one; its lock files go, as after a reboot.
	rm -f "$PGDATA_DIR/postmaster.pid" "$PG_SOCK"/.s.PGSQL.*.lock
}

cmd_promote() {
	running || die "not running ($PGDATA_DIR)"
	log "promote"
	if ! pg_ctl_ -w -t 60 promote >/dev/null; then
		tail -n 30 "$PG_LOG" >&2 || true
		die "pg_ctl promote failed (log: $PG_LOG)"
	fi
}

psql_() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$(dsn)" "$@"; }

# conf_set FILE KEY VALUE: KEY = 'VALUE' as the only line for KEY in FILE (postgresql.auto.conf).
conf_set() {
	local f="$1" tmp="$1.tmp"
	grep -v "^[[:space:]]*$2[[:space:]]*=" "$f" >"$tmp" 2>/dev/null || true
	printf "%s = '%s'\n" "$2" "${3//\'/\'\'}" >>"$tmp"
	mv "$tmp" "$f"
}

# copy_data SRC DST (internal: psql runs it between pg_backup_start and pg_backup_stop): the
# data directory without what a base backup leaves out. tar's exit status 1 (a file changed
# while it was read) is expected from a running cluster; WAL replay repairs it.
copy_data() {
	local rc=0
	tar -C "$1" -cf - --ignore-failed-read --warning=no-file-changed --warning=no-file-removed \
		--exclude=postmaster.pid --exclude=postmaster.opts --exclude=backup_label --exclude=tablespace_map \
		--exclude=standby.signal --exclude=recovery.signal --exclude='pgsql_tmp*' \
		--exclude='pg_wal/*' --exclude='pg_replslot/*' --exclude='pg_stat_tmp/*' --exclude='pg_dynshmem/*' \
		--exclude='pg_notify/*' --exclude='pg_serial/*' --exclude='pg_snapshots/*' --exclude='pg_subtrans/*' \
		. | tar -C "$2" -xpf - || rc=$?
	[ "$rc" -le 1 ] || die "copying $1 to $2 failed (tar exit $rc)"
	mkdir -p "$2/pg_wal/archive_status"
	: >"$2/.copied"
}

# standby_streaming DIR PORT: the standby in state dir DIR on PORT streams from its primary.
# (The port is given: the caller's WALRELAY_TEST_PG_PORT is the primary's.)
standby_streaming() {
	[ "$(WALRELAY_TEST_DIR="$1" WALRELAY_TEST_PG_PORT="$2" bash "$WALRELAY_ENV_DIR/pg.sh" psql -Atc "SELECT status FROM pg_stat_wal_receiver" 2>/dev/null 8>&-)" = streaming ]
}

cmd_standby_create() {
	local start=1
	if [ "${1:-}" = --no-start ]; then
		start=0
		shift
	fi
	if [ $# -lt 2 ] || [ $# -gt 3 ]; then die "usage: pg.sh standby-create [--no-start] DIR PORT [SLOT]"; fi
	local sdir sport slot major
	sdir="$(abs_path "$1")"
	sport="$2"
	slot="${3:-standby_$2}"
	[[ $sport =~ ^[0-9]+$ ]] || die "port '$sport' is not a number"
	[[ $slot =~ ^[a-z0-9_]+$ ]] || die "slot name '$slot': use lower-case letters, digits and _"
	running || die "the primary ($PGDATA_DIR) is not running; pg.sh start it first"
	major="$(server_major)"
	local sstate="$sdir/pg" sdata="$sdir/pg/data"
	[ ! -e "$sdata" ] || die "$sdata exists already"
	ensure_state_dir "$sdir"
	mkdir -p "$sstate/sock" "$sdata"
	chmod 700 "$sdata"
	ensure_reachable "$sstate"

	log "standby in $sdata (port $sport, slot $slot on 127.0.0.1:$PG_PORT, Postgres $major)"
	psql_ -c "SELECT pg_create_physical_replication_slot('$slot', true)
		WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '$slot')" >/dev/null
	local start_fn="pg_backup_start('walrelay standby $slot', true)" stop_fn="pg_backup_stop(false)"
	if [ "$major" -lt 15 ]; then
		start_fn="pg_start_backup('walrelay standby $slot', true, false)"
		stop_fn="pg_stop_backup(false, false)"
	fi
	# One session from start to stop (a non-exclusive backup ends with its session).
	printf '%s\n' "SELECT $start_fn;" \
		"\\! bash '$WALRELAY_ENV_DIR/pg.sh' _copy-data '$PGDATA_DIR' '$sdata'" \
		"\\o '$sdata/backup_label'" \
		"SELECT labelfile FROM $stop_fn;" \
		"\\o" | psql_ >/dev/null
	[ -f "$sdata/.copied" ] || die "copying the data directory failed"
	rm -f "$sdata/.copied"
	grep -q '^START WAL LOCATION' "$sdata/backup_label" || die "no backup label from $stop_fn"
	# Every WAL segment the primary still has: the backup's and the older ones slots need.
	local f
	for f in "$PGDATA_DIR"/pg_wal/0*; do
		cp -p "$f" "$sdata/pg_wal/" 2>/dev/null || [ ! -e "$f" ] || die "copy $f failed"
	done

	local auto="$sdata/postgresql.auto.conf"
	conf_set "$auto" primary_conninfo "host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres application_name=$slot"
	conf_set "$auto" primary_slot_name "$slot"
	conf_set "$auto" hot_standby_feedback on
	if [ "$major" -ge 17 ]; then
		conf_set "$auto" sync_replication_slots on
		conf_set "$auto" synchronized_standby_slots ""
	fi
	: >"$sdata/standby.signal"
	printf '%s\n' "$sport" >"$sstate/port"
	printf '%s\n' "$PGBIN" >"$sstate/pgbin"
	if is_root; then chown -R postgres: "$sstate"; fi

	if [ "$major" -ge 17 ]; then
		local have
		have="$(psql_ -c "SHOW synchronized_standby_slots")"
		case ",${have// /}," in
		*",$slot,"*) ;;
		*)
			psql_ -c "ALTER SYSTEM SET synchronized_standby_slots = '${have:+$have,}$slot'" -c "SELECT pg_reload_conf()" >/dev/null
			log "primary: synchronized_standby_slots = '${have:+$have,}$slot'"
			;;
		esac
	fi
	[ "$start" = 1 ] || return 0
	WALRELAY_TEST_DIR="$sdir" WALRELAY_TEST_PG_PORT="$sport" WALRELAY_TEST_PGBIN="$PGBIN" \
		bash "$WALRELAY_ENV_DIR/pg.sh" start 8>&-
	wait_until 60 standby_streaming "$sdir" "$sport" ||
		die "standby on port $sport not streaming after 60 s (log $sstate/postgres.log)"
	log "standby streaming: postgres://postgres@127.0.0.1:$sport/postgres?sslmode=disable"
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
kill9) cmd_kill9 ;;
restart-immediate) cmd_restart_immediate ;;
promote) cmd_promote ;;
standby-create)
	shift
	cmd_standby_create "$@"
	;;
_copy-data) copy_data "$2" "$3" ;;
status) cmd_status ;;
env) cmd_env ;;
psql)
	shift
	exec "$PGBIN/psql" -X -v ON_ERROR_STOP=1 "$(dsn)" "$@"
	;;
*)
	echo "usage: $0 start|stop|restart-immediate|kill|kill9|status|env|psql [ARGS...]|standby-create [--no-start] DIR PORT [SLOT]|promote" >&2
	exit 2
	;;
esac
