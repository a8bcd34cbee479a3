#!/usr/bin/env bash
# `make demo`: Postgres + Kafka + walrelay end to end.
#
# Starts a fresh Postgres and Kafka (own state dir and ports, so a test run can go on beside
# it), applies `walrelay migrate`, runs `walrelay run` in the background, writes outbox rows in
# a few transactions (one of them rolled back), waits until the committed events are in Kafka,
# prints them with kcat, stops walrelay with SIGTERM and then everything else.
#
# Knobs: WALRELAY_DEMO_DIR (default /tmp/walrelay-demo), WALRELAY_DEMO_PG_PORT (55442, or a free
# port when taken), WALRELAY_DEMO_KAFKA_PORT (59102, or a free block of 10 when taken),
# WALRELAY_BIN (default bin/walrelay, built when missing), WALRELAY_DEMO_KEEP=1 (leave Postgres
# and Kafka running afterwards).
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=demo
cd "$WALRELAY_ROOT"

WALRELAY_TEST_DIR="$(abs_path "${WALRELAY_DEMO_DIR:-/tmp/walrelay-demo}")"
export WALRELAY_TEST_DIR
# Ports: the knobs, else 55442 and 59102..59111, else free ones when those are taken.
WALRELAY_TEST_PG_PORT="${WALRELAY_DEMO_PG_PORT:-$(pick_port 55442 1)}" || die "no free port for Postgres"
WALRELAY_TEST_KAFKA_PORT="${WALRELAY_DEMO_KAFKA_PORT:-$(pick_port 59102 10)}" || die "no free ports for Kafka"
export WALRELAY_TEST_PG_PORT WALRELAY_TEST_KAFKA_PORT
export WALRELAY_TEST_REGISTRY="$WALRELAY_TEST_DIR/services"
unset WALRELAY_TEST_PGDATA WALRELAY_TEST_PG_DSN WALRELAY_TEST_KAFKA
BIN="$(abs_path "${WALRELAY_BIN:-bin/walrelay}")"
WLOG="$WALRELAY_TEST_DIR/walrelay.log"
WPID_FILE="$WALRELAY_TEST_DIR/walrelay.pid"
SLOT=walrelay

fresh_state_dir "$WALRELAY_TEST_DIR"

wpid=""
on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$wpid" ] && pid_alive "$wpid"; then
		terminate "$wpid" 30 || true
	fi
	if [ "${WALRELAY_DEMO_KEEP:-0}" = 1 ]; then
		log "WALRELAY_DEMO_KEEP=1: Postgres and Kafka left running; make clean stops them"
		"$WALRELAY_ENV_DIR/pg.sh" env
		"$WALRELAY_ENV_DIR/kafka.sh" env
	else
		stop_services "$WALRELAY_TEST_DIR"
	fi
	[ "$rc" -eq 0 ] || log "demo FAILED (exit $rc); logs in $WALRELAY_TEST_DIR"
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$WALRELAY_ENV_DIR/pg.sh" start 8>&-
"$WALRELAY_ENV_DIR/kafka.sh" start 8>&-
eval "$("$WALRELAY_ENV_DIR/pg.sh" env)"
eval "$("$WALRELAY_ENV_DIR/kafka.sh" env)"
DSN="$WALRELAY_TEST_PG_DSN"
BROKERS="$WALRELAY_TEST_KAFKA"
psql_() { "$WALRELAY_TEST_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN" "$@"; }

if [ ! -x "$BIN" ]; then
	log "building $BIN"
	mkdir -p "$(dirname "$BIN")"
	CGO_ENABLED=0 go build -o "$BIN" ./cmd/walrelay
fi

if [ -t 1 ]; then
	step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
	step() { printf '\n== %s\n' "$*"; }
fi

step "walrelay migrate"
"$BIN" migrate --postgres-dsn "$DSN" 8>&-
psql_ -c '\d public.outbox'

step "walrelay run (log: $WLOG)"
run_args=(run --postgres-dsn "$DSN" --kafka-brokers "$BROKERS" --slot "$SLOT"
	--metrics-addr 127.0.0.1:0 --heartbeat-interval 2s)
"$BIN" "${run_args[@]}" >"$WLOG" 2>&1 8>&- </dev/null &
wpid=$!
echo "$wpid" >"$WPID_FILE"
echo "pid $wpid: $BIN ${run_args[*]}"

# Events are only captured once the slot exists: wait until walrelay streams from it.
deadline=$((SECONDS + 60))
until [ "$(psql_ -Atc "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$SLOT' AND active")" = 1 ]; do
	if ! pid_alive "$wpid"; then
		tail -n 40 "$WLOG" >&2
		die "walrelay exited before it started streaming"
	fi
	[ "$SECONDS" -lt "$deadline" ] || { tail -n 40 "$WLOG" >&2; die "slot $SLOT not active after 60 s"; }
	sleep 0.2
done
psql_ -c "SELECT slot_name, plugin, active, confirmed_flush_lsn FROM pg_replication_slots"

step "application transactions (psql)"
SQL=$(
	cat <<'EOF'
-- 1: two orders in one transaction, one with a W3C traceparent header
BEGIN;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES
  ('order', 'o-1001', 'OrderCreated', '{"orderId": "o-1001", "total": 42.50, "currency": "EUR"}',
   '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}'),
  ('order', 'o-1002', 'OrderCreated', '{"orderId": "o-1002", "total": 19.99, "currency": "EUR"}', '{}');
COMMIT;

-- 2: a customer event; the app deletes its outbox row in the same transaction (the insert is in the WAL)
BEGIN;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES
  ('customer', 'c-7', 'CustomerRegistered', '{"customerId": "c-7", "email": "ada@example.com"}', '{"tenant": "acme"}');
DELETE FROM outbox WHERE aggregate_id = 'c-7';
COMMIT;

-- 3: rolled back: must never reach Kafka
BEGIN;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES
  ('order', 'o-9999', 'OrderCreated', '{"orderId": "o-9999", "note": "rolled back"}', '{}');
ROLLBACK;

-- 4: follow-ups in commit order per aggregate; a NULL payload becomes a tombstone
BEGIN;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES
  ('order', 'o-1001', 'OrderPaid', '{"orderId": "o-1001", "amount": 42.50}', '{}'),
  ('order', 'o-1002', 'OrderCancelled', NULL, '{}');
COMMIT;
EOF
)
printf '%s\n' "$SQL"
psql_ <<<"$SQL"
END_LSN="$(psql_ -Atc 'SELECT pg_current_wal_lsn()')"
declare -A want=([outbox.event.order]=4 [outbox.event.customer]=1)

step "waiting until Kafka holds the committed events"
count() { kcat -b "$BROKERS" -C -t "$1" -e -q -f 'x\n' 2>/dev/null | wc -l; }
deadline=$((SECONDS + 60))
while :; do
	done_=1
	for t in "${!want[@]}"; do
		[ "$(count "$t")" -ge "${want[$t]}" ] || done_=0
	done
	[ "$done_" = 1 ] && break
	pid_alive "$wpid" || { tail -n 40 "$WLOG" >&2; die "walrelay exited"; }
	[ "$SECONDS" -lt "$deadline" ] || { tail -n 40 "$WLOG" >&2; die "events not in Kafka after 60 s"; }
	sleep 0.5
done
for t in outbox.event.order outbox.event.customer; do
	echo "-- $t: $(count "$t") record(s), expected ${want[$t]}"
done

step "the records (kcat -C -e)"
for t in outbox.event.order outbox.event.customer; do
	kcat -b "$BROKERS" -C -t "$t" -e -q -Z \
		-f 'topic=%t partition=%p offset=%o ts=%T key=%k\n  headers: %h\n  value: %s\n'
done
echo
echo "-- as JSON (kcat -J):"
kcat -b "$BROKERS" -C -t outbox.event.order -e -q -J

step "checks"
if kcat -b "$BROKERS" -C -t outbox.event.order -e -q -f '%k %s\n' | grep -q 'o-9999'; then
	die "the rolled-back event o-9999 reached Kafka"
fi
echo "ok: the rolled-back transaction did not reach Kafka"
echo "records per aggregate key (count key partition): one partition per key keeps commit order"
kcat -b "$BROKERS" -C -t outbox.event.order -e -q -f '%k %p\n' | sort | uniq -c
if [ "$(kcat -b "$BROKERS" -C -t outbox.event.order -e -q -f '%k %p\n' | sort -u | awk '{print $1}' | uniq -d)" != "" ]; then
	die "one aggregate key landed on several partitions"
fi

step "slot position"
sleep 1.5 # one status interval
psql_ -c "SELECT slot_name, active, confirmed_flush_lsn, '$END_LSN' AS wal_after_last_commit,
  pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) AS retained_wal FROM pg_replication_slots"

step "SIGTERM walrelay"
kill -TERM "$wpid"
rc=0
if wait_pid_gone "$wpid" 40; then
	wait "$wpid" || rc=$?
else
	log "walrelay did not exit 40 s after SIGTERM"
	rc=124
fi
wpid=""
rm -f "$WPID_FILE"
echo "walrelay exit status: $rc (0 expected: drain, confirm, exit)"
echo "-- last lines of $WLOG:"
tail -n 8 "$WLOG"
[ "$rc" -eq 0 ] || die "walrelay exited with $rc after SIGTERM"
step "demo done"
