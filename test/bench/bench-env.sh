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
		kill -TERM "$wpid" 2>/dev/null || true
		wait_pid_gone "$wpid" 60 || kill -KILL "$wpid" 2>/dev/null || true
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
