# Sourced by bench.sh, latency.sh and debezium.sh (after ../env/common.sh): the benchmarks' own Postgres and
# Kafka, apart from the test suites' (state dir, ports and service registry; knobs
# WALRELAY_BENCH_DIR, WALRELAY_BENCH_PG_PORT, WALRELAY_BENCH_KAFKA_PORT).
# shellcheck shell=bash
WALRELAY_TEST_DIR="$(abs_path "${WALRELAY_BENCH_DIR:-/tmp/walrelay-bench}")"
export WALRELAY_TEST_DIR
# Ports: the knobs, else 55452 and 59112..59121, else free ones when those are taken.
WALRELAY_TEST_PG_PORT="${WALRELAY_BENCH_PG_PORT:-$(pick_port 55452 1)}" || die "no free port for Postgres"
WALRELAY_TEST_KAFKA_PORT="${WALRELAY_BENCH_KAFKA_PORT:-$(pick_port 59112 10)}" || die "no free ports for Kafka"
export WALRELAY_TEST_PG_PORT WALRELAY_TEST_KAFKA_PORT
export WALRELAY_TEST_REGISTRY="$WALRELAY_TEST_DIR/services"
unset WALRELAY_TEST_PGDATA WALRELAY_TEST_PG_DSN WALRELAY_TEST_KAFKA
# The broker gets the heap Kafka's own kafka-server-start.sh gives it (1 GiB) rather than the
# test suites' 512 MiB: with 512 MiB, G1's concurrent marking and C2 took ~15% of the machine's
# CPU (perf) during the first timed catch-up drain, and that run came out 0.15-0.25 below the
# others.
export WALRELAY_TEST_KAFKA_HEAP="${WALRELAY_TEST_KAFKA_HEAP:--Xms1g -Xmx1g}"
WPID_FILE="$WALRELAY_TEST_DIR/walrelay.pid"
RESULTS_DIR="${BENCH_RESULTS_DIR-test/bench/results}"

# bench_pad_expr PAD KIND: the SQL expression of a row's pad of PAD characters for
# bench_load_rows: hex text cut from public.bench_pad (KIND hex), or PAD x's (KIND x).
bench_pad_expr() {
	local pad="$1" half=$((($1 + 1) / 2))
	if [ "$2" = x ] || [ "$pad" -eq 0 ]; then
		echo "repeat('x', $pad)"
		return
	fi
	# Rows 7919 bytes apart in the blob: no two rows within lz4's 64 KiB window share text.
	echo "left(encode(substring(blob FROM ((i::bigint * 7919) % ($((32768 * 16)) - $half))::int + 1 FOR $half), 'hex'), $pad)"
}

# bench_load_rows N TXN_ROWS COLUMNS VALUES PUBLICATION: N rows into public.outbox, TXN_ROWS
# per committed transaction, in DO blocks. COLUMNS is the column list, VALUES the matching
# SELECT list over the row number i and the bytea blob (public.bench_pad, see
# bench_pad_expr). Sets TARGET to the last transaction's end LSN (what a consumer confirms for
# it), read from a probe slot made just before that transaction: the commit row of a peek
# through PUBLICATION carries txn->end_lsn.
bench_load_rows() {
	local n="$1" rows="$2" cols="$3" vals="$4" pub="$5" txns
	txns=$(((n + rows - 1) / rows))
	bench_load_sql() { # FIRST LAST: transactions FIRST..LAST (0-based)
		cat <<EOF
DO \$\$
DECLARE
  k int;
  blob bytea := (SELECT b FROM public.bench_pad);
BEGIN
  FOR k IN $1..$2 LOOP
    INSERT INTO public.outbox ($cols)
    SELECT $vals
    FROM generate_series(k * $rows + 1, least((k + 1) * $rows, $n)) AS i;
    COMMIT;
  END LOOP;
END
\$\$;
EOF
	}
	[ "$txns" -le 1 ] || bench_load_sql 0 $((txns - 2)) | psql_
	q "SELECT pg_create_logical_replication_slot('bench_load_probe', 'pgoutput')" >/dev/null
	bench_load_sql $((txns - 1)) $((txns - 1)) | psql_
	TARGET="$(q "SELECT lsn FROM pg_logical_slot_peek_binary_changes('bench_load_probe', NULL, NULL,
  'proto_version', '1', 'publication_names', '$pub') WHERE get_byte(data, 0) = ascii('C') ORDER BY lsn DESC LIMIT 1")"
	q "SELECT pg_drop_replication_slot('bench_load_probe')" >/dev/null
	[ -n "$TARGET" ] || die "could not find the last transaction's end LSN"
}

# bench_traps NAME SERVICES: on exit, stop walrelay ($wpid, if set) and, unless
# WALRELAY_BENCH_KEEP=1, the services (SERVICES names them in the log line); a failure says
# where the logs are. INT and TERM exit through it.
wpid=""
bench_traps() {
	BENCH_NAME="$1" BENCH_SERVICES="$2"
	trap bench_on_exit EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

bench_on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$wpid" ] && pid_alive "$wpid"; then
		terminate "$wpid" 60 || true
	fi
	if [ "${WALRELAY_BENCH_KEEP:-0}" = 1 ]; then
		log "WALRELAY_BENCH_KEEP=1: $BENCH_SERVICES left running; make clean stops them"
	else
		stop_services "$WALRELAY_TEST_DIR"
	fi
	[ "$rc" -eq 0 ] || log "$BENCH_NAME FAILED (exit $rc); logs in $WALRELAY_TEST_DIR"
	exit "$rc"
}

# bench_start_services: start the bench's Postgres and Kafka and set DSN and BROKERS for the
# helpers below.
bench_start_services() {
	"$WALRELAY_ENV_DIR/pg.sh" start 8>&-
	"$WALRELAY_ENV_DIR/kafka.sh" start 8>&-
	eval "$("$WALRELAY_ENV_DIR/pg.sh" env)"
	eval "$("$WALRELAY_ENV_DIR/kafka.sh" env)"
	DSN="$WALRELAY_TEST_PG_DSN"
	BROKERS="$WALRELAY_TEST_KAFKA"
}

psql_() { "$WALRELAY_TEST_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN" "$@"; }
q() { psql_ -Atc "$1"; }
now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", (b - a) / 1e9}'; }
