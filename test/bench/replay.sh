#!/usr/bin/env bash
# `make bench-replay`: how fast `walrelay replay` re-publishes outbox rows, beside how fast
# `walrelay run` catches up on the same rows from the WAL, and walrelay's peak RSS in both.
#
# Loads BENCH_N rows (payload ~BENCH_PAYLOAD bytes of jsonb text, BENCH_TXN_ROWS rows per
# transaction; the same loader as bench.sh) behind BENCH_RUNS fresh pgoutput slots, then per
# run, alternating which goes first:
#   - catch-up: `walrelay run` drains slot bench_catchup_<i> to topic bench.catchup<i>; the
#     clock stops when the slot's confirmed_flush_lsn reaches the last transaction's end LSN
#     (walrelay confirms only what Kafka acknowledged);
#   - replay: `walrelay replay` (every row of the table, no time range) to the topic template
#     bench.replay<i>.{aggregate_type}; the clock runs from the start of the process to its
#     exit 0 (connecting, counting the rows in its snapshot, the cursor, the last
#     acknowledgement).
# Both report rows/s over BENCH_N and walrelay's peak RSS (VmHWM, polled every 100 ms), and
# the Kafka record count of their topics (must be BENCH_N each).
#
# Before the runs it times one reading of the outbox's retained span (what `walrelay run` does
# every outbox-span-interval): the oldest created_at without and with an index on it.
#
# Machine-readable lines (also in the saved report):
#   RUN i=<i> first=catchup|replay catchup_s=.. catchup_rps=.. catchup_rss_mb=..
#       replay_s=.. replay_rps=.. replay_rss_mb=.. ratio=.. catchup_records=.. replay_records=..
#   RESULT n=.. payload=.. txn_rows=.. runs=.. catchup_rps_median=.. replay_rps_median=..
#       ratio_median=.. catchup_rss_mb_max=.. replay_rss_mb_max=.. ok=0|1
#   SPAN scan_ms=.. index_ms=..
#
# Knobs: BENCH_N (1000000), BENCH_PAYLOAD (200), BENCH_PAD (hex|x), BENCH_TXN_ROWS (100),
# BENCH_RUNS (2), BENCH_TIMEOUT (seconds for one drain or replay, 900), BENCH_REPLAY_ARGS
# (extra `walrelay replay` flags), BENCH_RESULTS_DIR (test/bench/results; empty: not saved),
# WALRELAY_BENCH_DIR, WALRELAY_BENCH_PG_PORT, WALRELAY_BENCH_KAFKA_PORT,
# WALRELAY_BIN (bin/walrelay, built when missing), WALRELAY_BENCH_KEEP=1 (leave the services
# running).
set -euo pipefail
# shellcheck source=../env/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../env/common.sh"
WALRELAY_LOG_TAG=bench-replay
cd "$WALRELAY_ROOT"

N="${BENCH_N:-1000000}"
PAYLOAD="${BENCH_PAYLOAD:-200}"
TXN_ROWS="${BENCH_TXN_ROWS:-100}"
TIMEOUT="${BENCH_TIMEOUT:-900}"
RUNS="${BENCH_RUNS:-2}"
PAD_KIND="${BENCH_PAD:-hex}"
for v in N PAYLOAD TXN_ROWS TIMEOUT RUNS; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, got '${!v}'"
done
[ "$RUNS" -le 9 ] || die "BENCH_RUNS must be at most 9, got $RUNS"

# shellcheck source=bench-env.sh
. "$WALRELAY_ROOT/test/bench/bench-env.sh"
BIN="$(abs_path "${WALRELAY_BIN:-bin/walrelay}")"
fresh_state_dir "$WALRELAY_TEST_DIR"
need_mb=$(((N * (PAYLOAD + 250) * (2 * RUNS + 1)) / 1000000 + 2000))
avail_mb="$(df -Pm "$WALRELAY_TEST_DIR" | awk 'NR == 2 {print $4}')"
[ "$avail_mb" -ge "$need_mb" ] || die "about $need_mb MB of disk needed under $WALRELAY_TEST_DIR, $avail_mb MB free"
bench_traps "bench-replay" "Postgres and Kafka"
bench_start_services
if [ ! -x "$BIN" ]; then
	log "building $BIN"
	mkdir -p "$(dirname "$BIN")"
	CGO_ENABLED=0 go build -o "$BIN" ./cmd/walrelay 8>&-
fi

psql_ -c "ALTER SYSTEM SET max_wal_size = '16GB'" -c "ALTER SYSTEM SET checkpoint_timeout = '1h'" -c "SELECT pg_reload_conf()" >/dev/null
psql_ -f migrations/001_outbox.sql
psql_ -c "CREATE UNLOGGED TABLE public.bench_pad AS
  SELECT string_agg(decode(md5(g::text), 'hex'), ''::bytea ORDER BY g) AS b FROM generate_series(1, 32768) AS g"
psql_ -c "CREATE PUBLICATION walrelay FOR TABLE public.outbox WITH (publish = 'insert')"
for ((i = 1; i <= RUNS; i++)); do
	q "SELECT pg_create_logical_replication_slot('bench_catchup_$i', 'pgoutput')" >/dev/null
done
PAD=$((PAYLOAD > 26 ? PAYLOAD - 26 : 0))
log "loading $N rows, $TXN_ROWS per transaction"
bench_load_rows "$N" "$TXN_ROWS" "aggregate_type, aggregate_id, event_type, payload" \
	"'bench', 'agg-' || (i % 1024), 'BenchEvent', jsonb_build_object('seq', i, 'pad', $(bench_pad_expr "$PAD" "$PAD_KIND"))" walrelay
psql_ -c "ALTER TABLE public.outbox SET (autovacuum_enabled = false)" -c "VACUUM (ANALYZE) public.outbox" -c "CHECKPOINT"
[ "$(q "SELECT count(*) FROM public.outbox")" = "$N" ] || die "loaded a wrong number of rows"
sync -f "$WALRELAY_TEST_DIR" 2>/dev/null || sync

# What one reading of the outbox's retained span costs `walrelay run` (outbox-span-interval,
# default 1m) on these rows: the oldest created_at, best of 3, without and with an index on it
# (dropped again: the replay and the catch-up run on the table as migrations/001 makes it).
span_ms() {
	for _ in 1 2 3; do
		psql_ -c '\timing on' -c "SELECT created_at FROM public.outbox ORDER BY created_at LIMIT 1" | awk '/^Time:/ {print $2}'
	done | sort -g | head -n1
}
SPAN_SCAN_MS="$(span_ms)"
psql_ -c "CREATE INDEX bench_span_idx ON public.outbox (created_at)"
SPAN_INDEX_MS="$(span_ms)"
psql_ -c "DROP INDEX bench_span_idx" -c "CHECKPOINT"
log "span reading: ${SPAN_SCAN_MS} ms without an index on created_at, ${SPAN_INDEX_MS} ms with one"
COMMON=(--postgres-dsn "$DSN" --kafka-brokers "$BROKERS" --publication walrelay)

# peak_rss PID: VmHWM in KB (empty once gone).
peak_rss() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2>/dev/null || true; }
records() { # topic prefix: records over its topics (non-transactional: one offset each)
	kcat -b "$BROKERS" -L 2>/dev/null | awk -v p="$1" '$1 == "topic" && index($2, "\"" p) == 1 {gsub("\"", "", $2); print $2}' |
		while read -r t; do
			kcat -b "$BROKERS" -L -t "$t" | awk '$1 == "partition" {sub(",", "", $2); print $2}' |
				while read -r p; do kcat -b "$BROKERS" -Q -t "$t:$p:-1"; done
		done | awk '{s += $NF} END {print s + 0}'
}

declare -A CS CR RS RR FIRST CREC RREC
run_catchup() { # i
	local i="$1" t0 log_file="$WALRELAY_TEST_DIR/catchup-$1.log" hwm=""
	log "run $i: walrelay run catching up on slot bench_catchup_$i"
	t0=$(now_ns)
	"$BIN" run "${COMMON[@]}" --slot "bench_catchup_$i" --topic "bench.catchup$i" --heartbeat-interval 0 \
		--status-interval 100ms --metrics-addr "" >"$log_file" 2>&1 8>&- </dev/null &
	wpid=$!
	local deadline=$((SECONDS + TIMEOUT))
	until [ "$(q "SELECT confirmed_flush_lsn >= '$TARGET'::pg_lsn FROM pg_replication_slots WHERE slot_name = 'bench_catchup_$i'")" = t ]; do
		pid_alive "$wpid" || { tail -n 20 "$log_file" >&2; die "run $i: walrelay run exited"; }
		[ "$SECONDS" -lt "$deadline" ] || die "run $i: no catch-up within ${TIMEOUT}s"
		hwm="$(peak_rss "$wpid")"
		sleep 0.1
	done
	CS[$i]="$(secs "$t0" "$(now_ns)")"
	hwm="$(peak_rss "$wpid")"
	CR[$i]="$hwm"
	kill -TERM "$wpid"
	wait "$wpid" || die "run $i: walrelay run exited with $? after SIGTERM"
	wpid=""
	log "run $i: catch-up ${CS[$i]} s"
}
run_replay() { # i
	local i="$1" t0 log_file="$WALRELAY_TEST_DIR/replay-$1.log" hwm="" extra=() rc=0
	read -r -a extra <<<"${BENCH_REPLAY_ARGS:-}"
	log "run $i: walrelay replay of every row to bench.replay$i.*"
	t0=$(now_ns)
	"$BIN" replay "${COMMON[@]}" --slot "bench_catchup_$i" --topic "bench.replay$i.{aggregate_type}" --progress-interval 5s \
		"${extra[@]}" >"$log_file.out" 2>"$log_file" 8>&- </dev/null &
	wpid=$!
	local deadline=$((SECONDS + TIMEOUT))
	while pid_alive "$wpid"; do
		[ "$SECONDS" -lt "$deadline" ] || die "run $i: replay not done within ${TIMEOUT}s"
		local h
		h="$(peak_rss "$wpid")"
		[ -z "$h" ] || hwm="$h"
		sleep 0.1
	done
	wait "$wpid" || rc=$?
	RS[$i]="$(secs "$t0" "$(now_ns)")"
	RR[$i]="$hwm"
	wpid=""
	[ "$rc" -eq 0 ] || { tail -n 20 "$log_file" >&2; die "run $i: walrelay replay exited with $rc"; }
	log "run $i: replay ${RS[$i]} s: $(cat "$log_file.out")"
}

for ((i = 1; i <= RUNS; i++)); do
	if ((i % 2 == 1)); then
		FIRST[$i]=catchup
		run_catchup "$i"
		run_replay "$i"
	else
		FIRST[$i]=replay
		run_replay "$i"
		run_catchup "$i"
	fi
	CREC[$i]="$(records "bench.catchup$i")"
	RREC[$i]="$(records "bench.replay$i.")"
done

rate() { awk -v n="$1" -v s="$2" 'BEGIN {if (s > 0) printf "%.0f", n / s; else print "-"}'; }
mb() { awk -v k="$1" 'BEGIN {if (k != "") printf "%.1f", k / 1024; else print "-"}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
REPORT="$WALRELAY_TEST_DIR/result.txt"
ok=1
crps=() rrps=() ratios=() crss=() rrss=()
{
	echo "walrelay replay vs walrelay run catch-up: $N rows of ~$PAYLOAD B, $TXN_ROWS per transaction, $(nproc) cores"
	for ((i = 1; i <= RUNS; i++)); do
		c="$(rate "$N" "${CS[$i]}")" r="$(rate "$N" "${RS[$i]}")"
		ratio="$(awk -v a="$r" -v b="$c" 'BEGIN {printf "%.2f", a / b}')"
		crps+=("$c") rrps+=("$r") ratios+=("$ratio") crss+=("$(mb "${CR[$i]}")") rrss+=("$(mb "${RR[$i]}")")
		[ "${CREC[$i]}" = "$N" ] && [ "${RREC[$i]}" = "$N" ] || ok=0
		echo "RUN i=$i first=${FIRST[$i]} catchup_s=${CS[$i]} catchup_rps=$c catchup_rss_mb=$(mb "${CR[$i]}") replay_s=${RS[$i]} replay_rps=$r replay_rss_mb=$(mb "${RR[$i]}") ratio=$ratio catchup_records=${CREC[$i]} replay_records=${RREC[$i]}"
	done
	echo "SPAN scan_ms=$SPAN_SCAN_MS index_ms=$SPAN_INDEX_MS"
	echo "RESULT n=$N payload=$PAYLOAD txn_rows=$TXN_ROWS runs=$RUNS catchup_rps_median=$(median "${crps[@]}") replay_rps_median=$(median "${rrps[@]}") ratio_median=$(median "${ratios[@]}") catchup_rss_mb_max=$(printf '%s\n' "${crss[@]}" | sort -g | tail -n1) replay_rss_mb_max=$(printf '%s\n' "${rrss[@]}" | sort -g | tail -n1) ok=$ok"
} | tee "$REPORT"
if [ -n "$RESULTS_DIR" ]; then
	mkdir -p "$RESULTS_DIR"
	cp "$REPORT" "$RESULTS_DIR/bench-replay-$(date -u +%Y%m%d-%H%M%S)-n$N-p$PAYLOAD.txt"
fi
[ "$ok" = 1 ] || die "a topic does not hold $N records"
