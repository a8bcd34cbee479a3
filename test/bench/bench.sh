#!/usr/bin/env bash
# `make bench`: how fast walrelay drains a backlog compared with pg_recvlogical.
#
# Pre-loads BENCH_N outbox rows (payload ~BENCH_PAYLOAD bytes of jsonb, BENCH_TXN_ROWS rows per
# transaction) behind two fresh pgoutput slots made before the load, then in the same run:
#   1. pg_recvlogical drains slot bench_recv to /dev/null up to the last transaction's end LSN;
#   2. walrelay drains slot bench_walrelay to Kafka; the clock stops when the slot's
#      confirmed_flush_lsn reaches that LSN, which walrelay only confirms once Kafka acked every
#      record (polled every 100 ms), then walrelay gets SIGTERM.
# Prints seconds, events/s and WAL MB/s for both, the ratio, walrelay's peak RSS (VmHWM just
# before SIGTERM), and checks that Kafka holds BENCH_N records (sum of end offsets).
#
# Knobs: BENCH_N (200000), BENCH_PAYLOAD (200), BENCH_TXN_ROWS (100), BENCH_TIMEOUT (seconds
# for walrelay's drain, 900), BENCH_WALRELAY_ARGS (extra `walrelay run` flags),
# WALRELAY_BENCH_DIR (/tmp/walrelay-bench), WALRELAY_BENCH_PG_PORT (55452),
# WALRELAY_BENCH_KAFKA_PORT (59112), WALRELAY_BIN (bin/walrelay, built when missing),
# WALRELAY_BENCH_KEEP=1 (leave Postgres and Kafka running).
set -euo pipefail
# shellcheck source=../env/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../env/common.sh"
WALRELAY_LOG_TAG=bench
cd "$WALRELAY_ROOT"

N="${BENCH_N:-200000}"
PAYLOAD="${BENCH_PAYLOAD:-200}"
TXN_ROWS="${BENCH_TXN_ROWS:-100}"
TIMEOUT="${BENCH_TIMEOUT:-900}"
for v in N PAYLOAD TXN_ROWS TIMEOUT; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, got '${!v}'"
done
TOPIC=outbox.event.bench

WALRELAY_TEST_DIR="$(abs_path "${WALRELAY_BENCH_DIR:-/tmp/walrelay-bench}")"
export WALRELAY_TEST_DIR
export WALRELAY_TEST_PG_PORT="${WALRELAY_BENCH_PG_PORT:-55452}"
export WALRELAY_TEST_KAFKA_PORT="${WALRELAY_BENCH_KAFKA_PORT:-59112}"
export WALRELAY_TEST_REGISTRY="$WALRELAY_TEST_DIR/services"
unset WALRELAY_TEST_PGDATA WALRELAY_TEST_PG_DSN WALRELAY_TEST_KAFKA
BIN="$(abs_path "${WALRELAY_BIN:-bin/walrelay}")"
WLOG="$WALRELAY_TEST_DIR/walrelay.log"
WPID_FILE="$WALRELAY_TEST_DIR/walrelay.pid"
RESULT="$WALRELAY_TEST_DIR/result.txt"

take_lock "$WALRELAY_TEST_DIR"
"$WALRELAY_ENV_DIR/deps.sh" 8>&-
stop_services "$WALRELAY_TEST_DIR"
safe_wipe "$WALRELAY_TEST_DIR"
ensure_state_dir "$WALRELAY_TEST_DIR"

wpid=""
on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$wpid" ] && pid_alive "$wpid"; then
		kill -TERM "$wpid" 2>/dev/null || true
		wait_pid_gone "$wpid" 60 || kill -KILL "$wpid" 2>/dev/null || true
	fi
	if [ "${WALRELAY_BENCH_KEEP:-0}" = 1 ]; then
		log "WALRELAY_BENCH_KEEP=1: Postgres and Kafka left running; make clean stops them"
	else
		stop_services "$WALRELAY_TEST_DIR"
	fi
	[ "$rc" -eq 0 ] || log "bench FAILED (exit $rc); logs in $WALRELAY_TEST_DIR"
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
q() { psql_ -Atc "$1"; }
now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", (b - a) / 1e9}'; }

# The binary is optional up to the walrelay drain: the recvlogical half is reported either way.
walrelay_problem=""
if [ ! -x "$BIN" ]; then
	log "building $BIN"
	mkdir -p "$(dirname "$BIN")"
	CGO_ENABLED=0 go build -o "$BIN" ./cmd/walrelay 8>&- || walrelay_problem="could not build ./cmd/walrelay"
fi

# --- schema, publication and the two slots, before any row exists -----------------------
if [ -f migrations/001_outbox.sql ]; then
	psql_ -f migrations/001_outbox.sql
else
	psql_ -c "CREATE TABLE IF NOT EXISTS public.outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	  aggregate_type text NOT NULL, aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb,
	  headers jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now())"
fi
psql_ -c "CREATE PUBLICATION walrelay FOR TABLE public.outbox WITH (publish = 'insert')"
q "SELECT pg_create_logical_replication_slot('bench_walrelay', 'pgoutput')" >/dev/null
q "SELECT pg_create_logical_replication_slot('bench_recv', 'pgoutput')" >/dev/null
START_LSN="$(q "SELECT min(confirmed_flush_lsn) FROM pg_replication_slots WHERE slot_name IN ('bench_walrelay', 'bench_recv')")"

# --- load ---------------------------------------------------------------------------------
TXNS=$(((N + TXN_ROWS - 1) / TXN_ROWS))
# jsonb text of {"pad": "x…", "seq": 123456} is 26 bytes plus the pad for a 6-digit seq.
PAD=$((PAYLOAD > 26 ? PAYLOAD - 26 : 0))
insert_rows() { # first last
	cat <<EOF
INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
SELECT 'bench', 'agg-' || (i % 1024), 'BenchEvent', jsonb_build_object('seq', i, 'pad', repeat('x', $PAD))
FROM generate_series($1, $2) AS i;
EOF
}
log "loading $N rows in $TXNS transactions of up to $TXN_ROWS rows (payload pad $PAD)"
t0=$(now_ns)
if [ "$TXNS" -gt 1 ]; then
	psql_ <<EOF
DO \$\$
DECLARE k int;
BEGIN
  FOR k IN 0..$((TXNS - 2)) LOOP
    INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
    SELECT 'bench', 'agg-' || (i % 1024), 'BenchEvent', jsonb_build_object('seq', i, 'pad', repeat('x', $PAD))
    FROM generate_series(k * $TXN_ROWS + 1, (k + 1) * $TXN_ROWS) AS i;
    COMMIT;
  END LOOP;
END
\$\$;
EOF
fi
# The last transaction's end LSN (what a consumer confirms for it) is read from a probe slot
# made just before it: the commit row of a peek carries txn->end_lsn.
q "SELECT pg_create_logical_replication_slot('bench_probe', 'pgoutput')" >/dev/null
insert_rows $(((TXNS - 1) * TXN_ROWS + 1)) "$N" | psql_
t1=$(now_ns)
TARGET="$(q "SELECT lsn FROM pg_logical_slot_peek_binary_changes('bench_probe', NULL, NULL,
  'proto_version', '1', 'publication_names', 'walrelay') WHERE get_byte(data, 0) = ascii('C') ORDER BY lsn DESC LIMIT 1")"
q "SELECT pg_drop_replication_slot('bench_probe')" >/dev/null
[ -n "$TARGET" ] || die "could not find the last transaction's end LSN"
ROWS="$(q "SELECT count(*) FROM public.outbox")"
AVG_PAYLOAD="$(q "SELECT round(avg(octet_length(payload::text))) FROM public.outbox")"
WAL_BYTES="$(q "SELECT pg_wal_lsn_diff('$TARGET', '$START_LSN')::bigint")"
q "CHECKPOINT" >/dev/null
[ "$ROWS" = "$N" ] || die "loaded $ROWS rows, expected $N"
log "loaded in $(secs "$t0" "$t1") s; WAL $START_LSN .. $TARGET ($((WAL_BYTES / 1000000)) MB); avg payload $AVG_PAYLOAD B"

# --- drain 1: pg_recvlogical --------------------------------------------------------------
log "pg_recvlogical draining bench_recv to /dev/null (endpos $TARGET)"
t0=$(now_ns)
"$WALRELAY_TEST_PGBIN/pg_recvlogical" -d "$DSN" --slot bench_recv --start --no-loop \
	-o proto_version=1 -o publication_names=walrelay -F 0 -f /dev/null --endpos "$TARGET" 8>&- ||
	die "pg_recvlogical failed"
t1=$(now_ns)
RECV_S="$(secs "$t0" "$t1")"
log "pg_recvlogical: $RECV_S s"

# --- drain 2: walrelay --------------------------------------------------------------------
WR_S="" WR_RSS_KB="" WR_RC="" KAFKA_RECORDS=""
run_walrelay() {
	local extra=()
	read -r -a extra <<<"${BENCH_WALRELAY_ARGS:-}"
	log "walrelay draining bench_walrelay to Kafka (log: $WLOG)"
	t0=$(now_ns)
	"$BIN" run --postgres-dsn "$DSN" --kafka-brokers "$BROKERS" --slot bench_walrelay \
		--publication walrelay --heartbeat-interval 0 --status-interval 100ms --metrics-addr "" \
		"${extra[@]}" >"$WLOG" 2>&1 8>&- </dev/null &
	wpid=$!
	echo "$wpid" >"$WPID_FILE"
	local deadline=$((SECONDS + TIMEOUT)) hwm
	while :; do
		if [ "$(q "SELECT confirmed_flush_lsn >= '$TARGET'::pg_lsn FROM pg_replication_slots WHERE slot_name = 'bench_walrelay'")" = t ]; then
			t1=$(now_ns)
			break
		fi
		hwm="$(awk '/^VmHWM:/ {print $2}' "/proc/$wpid/status" 2>/dev/null || true)"
		[ -n "$hwm" ] && WR_RSS_KB="$hwm"
		if ! pid_alive "$wpid"; then
			tail -n 20 "$WLOG" >&2
			walrelay_problem="walrelay exited before confirming $TARGET"
			return 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 20 "$WLOG" >&2
			walrelay_problem="walrelay did not confirm $TARGET within ${TIMEOUT}s (confirmed: $(q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'bench_walrelay'"))"
			return 1
		fi
		sleep 0.1
	done
	WR_S="$(secs "$t0" "$t1")"
	hwm="$(awk '/^VmHWM:/ {print $2}' "/proc/$wpid/status" 2>/dev/null || true)"
	[ -n "$hwm" ] && WR_RSS_KB="$hwm"
	kill -TERM "$wpid"
	WR_RC=0
	if wait_pid_gone "$wpid" 60; then
		wait "$wpid" || WR_RC=$?
	else
		WR_RC="no exit 60 s after SIGTERM"
		kill -KILL "$wpid" 2>/dev/null || true
	fi
	wpid=""
	rm -f "$WPID_FILE"
	log "walrelay: $WR_S s, exit after SIGTERM: $WR_RC"
}
if [ -z "$walrelay_problem" ]; then
	run_walrelay || true
fi

# Kafka: sum of end offsets over the topic's partitions (idempotent, non-transactional
# producer: one offset per record).
if kcat -b "$BROKERS" -L -t "$TOPIC" 2>/dev/null | grep -q 'partition 0'; then
	mapfile -t parts < <(kcat -b "$BROKERS" -L -t "$TOPIC" | awk '$1 == "partition" {sub(",", "", $2); print $2}')
	qargs=()
	for p in "${parts[@]}"; do qargs+=(-t "$TOPIC:$p:-1"); done
	KAFKA_RECORDS="$(kcat -b "$BROKERS" -Q "${qargs[@]}" | awk '{s += $NF} END {print s + 0}')"
fi

# --- report -------------------------------------------------------------------------------
rate() { awk -v n="$1" -v s="$2" 'BEGIN {if (s > 0) printf "%.0f", n / s; else print "-"}'; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN {if (s > 0) printf "%.1f", b / s / 1e6; else print "-"}'; }
{
	echo
	echo "walrelay bench: N=$N events, payload ~$PAYLOAD B (avg $AVG_PAYLOAD B jsonb text), $TXN_ROWS rows/txn, WAL $(mbps "$WAL_BYTES" 1) MB"
	echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); Postgres $("$WALRELAY_TEST_PGBIN/postgres" --version | awk '{print $3}'), Kafka ${WALRELAY_KAFKA_VERSION:-4.3.1} (1 broker, same machine)"
	printf '%-16s %9s %12s %10s\n' "" seconds events/s "WAL MB/s"
	printf '%-16s %9s %12s %10s\n' pg_recvlogical "$RECV_S" "$(rate "$N" "$RECV_S")" "$(mbps "$WAL_BYTES" "$RECV_S")"
	if [ -n "$WR_S" ]; then
		printf '%-16s %9s %12s %10s\n' walrelay "$WR_S" "$(rate "$N" "$WR_S")" "$(mbps "$WAL_BYTES" "$WR_S")"
		echo "ratio walrelay/pg_recvlogical (events/s): $(awk -v a="$RECV_S" -v b="$WR_S" 'BEGIN {printf "%.2f", a / b}')"
		echo "walrelay peak RSS (VmHWM): $(awk -v k="${WR_RSS_KB:-0}" 'BEGIN {printf "%.1f MB", k / 1024}')"
		echo "walrelay exit status after SIGTERM: $WR_RC"
	else
		printf '%-16s %9s\n' walrelay "n/a: $walrelay_problem"
	fi
	if [ -n "$KAFKA_RECORDS" ]; then
		verdict="OK"
		[ "$KAFKA_RECORDS" = "$N" ] || verdict="MISMATCH (expected $N)"
		echo "Kafka $TOPIC: $KAFKA_RECORDS records (${#parts[@]} partitions): $verdict"
	else
		echo "Kafka $TOPIC: topic not found"
	fi
	echo "(walrelay's time includes its start-up; pg_recvlogical's includes its connection.)"
} | tee "$RESULT"

[ -n "$WR_S" ] || die "$walrelay_problem"
[ "$WR_RC" = 0 ] || die "walrelay exit status after SIGTERM: $WR_RC"
[ "$KAFKA_RECORDS" = "$N" ] || die "Kafka holds ${KAFKA_RECORDS:-no} records for $TOPIC, expected $N"
