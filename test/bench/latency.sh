#!/usr/bin/env bash
# Live latency of walrelay: events written at a fixed rate, consumed from Kafka as they arrive.
#
# Starts the bench's own Postgres and Kafka (the state dir and ports of test/bench/bench.sh,
# under the same lock, wiped first), migrates the outbox table, then for each entry of LAT_RATES:
# starts walrelay (--topic 'lat.{aggregate_type}' --metrics-addr 127.0.0.1:0, pprof off, other
# flags at their defaults plus LAT_WALRELAY_ARGS), runs test/bench/latency (see its header) for
# LAT_DURATION at that rate ("max": as fast as LAT_CONNS connections can write), stops walrelay
# with SIGTERM (it must exit 0) and collects the result. walrelay is restarted for every rate so
# its peak RSS (VmHWM) belongs to that rate. Prints one table and saves it (with each rate's
# per-second timeline CSV) under BENCH_RESULTS_DIR.
#
# Latency = consumer receive time - Kafka record timestamp (the commit time walrelay puts
# there; millisecond resolution, so +0..1 ms). The table splits p99 at the walsender (pg99:
# commit -> decoded and sent by Postgres; aft99: the rest, i.e. walrelay, Kafka and the
# consumer), see the program's header. Everything, including the writer and the consumer,
# shares this machine's cores with Postgres, Kafka and walrelay; the "busy" column is the whole
# machine's CPU use during the run. If the writer cannot keep the rate, "achieved" says so.
#
# Before the measured rates, a warm-up step (LAT_WARMUP, 60s; 0 skips it) at LAT_WARMUP_RATE
# (5000) events/s is run and reported apart, so the freshly started broker's JVM is warm: its
# CPU for the same 1000 events/s fell from ~37% to ~9% over the first minute of load. (Each
# run of the program also sends 2 s of uncounted pings first: without them one partition of a
# fresh consumer arrived only at the end of its first fetch wait, up to 1 s late, also with
# broker-append timestamps (-log-append-time), i.e. not walrelay's delay.)
#
# Knobs: LAT_RATES ("1000 5000 20000 max"; an entry RATExN runs that step with N events per
# transaction instead of LAT_TXN_SIZE, e.g. "1000 1000x10"; an entry RATE[xN]:FLAG,FLAG adds
# walrelay flags to that step only, e.g. "1000 1000:--linger=0 1000:--status-interval=100ms"; the flag "floor" runs
# test/bench/floor in walrelay's place, the least any relay on walrelay's libraries does per
# event, e.g. "1000 1000:floor 1000:floor,--linger=0", see its header; it needs the publication
# walrelay creates, so a floor step must not come first with LAT_WARMUP=0),
# LAT_DURATION (20s), LAT_TXN_SIZE (1 event per transaction by default), LAT_CONNS (4 writer connections), LAT_PAYLOAD (200
# bytes), LAT_DRAIN (60s: wait for the tail after writing stops), LAT_WARMUP, LAT_WARMUP_RATE
# (above), LAT_WALRELAY_ARGS (extra `walrelay run` flags for every step),
# LAT_PROGRAM_ARGS (extra flags of test/bench/latency, e.g. -log-append-time),
# LAT_PPROF_SECONDS (0: off; N: walrelay runs with --pprof and an N-second CPU profile is taken
# in every measured step, starting LAT_PPROF_DELAY (4s) after the program starts, i.e. after
# its 2 s of pings: keep LAT_DURATION above delay + N; saved next to the report as
# pprof-<label>.pb.gz, with the binary, for `go tool pprof`),
# BENCH_RESULTS_DIR (test/bench/results; empty: not saved), WALRELAY_BENCH_DIR
# (/tmp/walrelay-bench), WALRELAY_BENCH_PG_PORT (55452; free ports when taken), WALRELAY_BENCH_KAFKA_PORT (59112),
# WALRELAY_TEST_KAFKA_HEAP (broker heap, "-Xms1g -Xmx1g"),
# WALRELAY_BIN (default: built from the tree into the state dir), WALRELAY_BENCH_KEEP=1 (leave
# Postgres and Kafka running).
set -euo pipefail
# shellcheck source=../env/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../env/common.sh"
WALRELAY_LOG_TAG=latency
cd "$WALRELAY_ROOT"

read -r -a RATES <<<"${LAT_RATES:-1000 5000 20000 max}"
DURATION="${LAT_DURATION:-20s}"
TXN_SIZE="${LAT_TXN_SIZE:-1}"
CONNS="${LAT_CONNS:-4}"
PAYLOAD="${LAT_PAYLOAD:-200}"
DRAIN="${LAT_DRAIN:-60s}"
WARMUP="${LAT_WARMUP:-60s}"
WARMUP_RATE="${LAT_WARMUP_RATE:-5000}"
PPROF_SECONDS="${LAT_PPROF_SECONDS:-0}"
PPROF_DELAY="${LAT_PPROF_DELAY:-4}"
[[ "$PPROF_SECONDS" =~ ^[0-9]+$ && "$PPROF_DELAY" =~ ^[0-9]+$ ]] || die "LAT_PPROF_SECONDS and LAT_PPROF_DELAY must be whole numbers of seconds"
for r in "${RATES[@]}"; do
	[[ "$r" =~ ^([1-9][0-9]*|max)(x[1-9][0-9]*)?(:.*)?$ ]] || die "LAT_RATES entries must be RATE, RATExTXN_SIZE or either followed by :FLAG,FLAG... (RATE a positive whole number or max), got '$r'"
done
[ "${#RATES[@]}" -gt 0 ] || die "LAT_RATES is empty"
for v in TXN_SIZE CONNS PAYLOAD; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "LAT_$v must be a positive whole number, got '${!v}'"
done
[[ "$DURATION" =~ ^[0-9.]+(ms|s|m)$ ]] || die "LAT_DURATION must be a Go duration such as 20s, got '$DURATION'"
[[ "$WARMUP" =~ ^(0|[0-9.]+(ms|s|m))$ ]] || die "LAT_WARMUP must be 0 or a Go duration such as 5s, got '$WARMUP'"
[[ "$WARMUP_RATE" =~ ^[0-9]+$ ]] || die "LAT_WARMUP_RATE must be a whole number (0: max), got '$WARMUP_RATE'"

# shellcheck source=bench-env.sh
. "$WALRELAY_ROOT/test/bench/bench-env.sh"
STAMP="$(date +%Y%m%d-%H%M%S)"

fresh_state_dir "$WALRELAY_TEST_DIR"

bench_traps "latency bench" "Postgres and Kafka"

BIN="${WALRELAY_BIN:-}"
if [ -z "$BIN" ]; then
	BIN="$WALRELAY_TEST_DIR/walrelay"
	log "building $BIN"
	CGO_ENABLED=0 go build -o "$BIN" ./cmd/walrelay 8>&-
fi
BIN="$(abs_path "$BIN")"
LAT="$WALRELAY_TEST_DIR/latency"
go build -o "$LAT" ./test/bench/latency 8>&-
FLOOR="$WALRELAY_TEST_DIR/floor"
CGO_ENABLED=0 go build -o "$FLOOR" ./test/bench/floor 8>&-

bench_start_services

"$BIN" migrate --postgres-dsn "$DSN" 8>&- >&2

start_walrelay() { # log file, extra flags (space-separated; "floor": test/bench/floor instead)
	local extra=() deadline bin="$BIN" f
	read -r -a extra <<<"${LAT_WALRELAY_ARGS:-} ${2:-}"
	for f in "${!extra[@]}"; do
		if [ "${extra[$f]}" = floor ]; then
			bin="$FLOOR"
			unset 'extra[f]'
		fi
	done
	"$bin" run --postgres-dsn "$DSN" --kafka-brokers "$BROKERS" --slot walrelay_lat \
		--publication walrelay --topic 'lat.{aggregate_type}' --metrics-addr 127.0.0.1:0 --pprof="$([ "$PPROF_SECONDS" -gt 0 ] && echo true || echo false)" \
		"${extra[@]}" >"$1" 2>&1 8>&- </dev/null &
	wpid=$!
	echo "$wpid" >"$WPID_FILE"
	deadline=$((SECONDS + 60))
	until [ "$(q "SELECT active FROM pg_replication_slots WHERE slot_name = 'walrelay_lat'")" = t ]; do
		pid_alive "$wpid" || { tail -n 20 "$1" >&2; die "walrelay exited during start-up (log: $1)"; }
		[ "$SECONDS" -lt "$deadline" ] || die "walrelay did not start streaming within 60 s (log: $1)"
		sleep 0.2
	done
}

WRC=""
stop_walrelay() { # sets WRC to walrelay's exit status
	local rc=0
	kill -TERM "$wpid"
	if wait_pid_gone "$wpid" 60; then
		wait "$wpid" || rc=$?
	else
		rc="no-exit-60s-after-SIGTERM"
		kill -KILL "$wpid" 2>/dev/null || true
	fi
	wpid=""
	rm -f "$WPID_FILE"
	WRC="$rc"
}

# step LABEL RATE DURATION TXN_SIZE [FLAGS]: one walrelay start (with FLAGS), one program run,
# one SIGTERM; sets STEP_LINE.
problems=()
STEP_LINE=""
step() {
	local label="$1" rate="$2" duration="$3" txn="$4" wlog="$WALRELAY_TEST_DIR/walrelay-$1.log" line lrc addr ppid=""
	start_walrelay "$wlog" "${5:-}"
	addr="$(grep -o '"addr":"[^"]*"' "$wlog" | head -n 1 | cut -d'"' -f4)" || addr="" # none from floor
	log "$label: walrelay pid $wpid (metrics $addr); writing for $duration, $txn event(s)/txn"
	if [ "$PPROF_SECONDS" -gt 0 ] && [ "$label" != warmup ]; then
		(sleep "$PPROF_DELAY" && curl -sf -o "$WALRELAY_TEST_DIR/pprof-$label.pb.gz" \
			"http://$addr/debug/pprof/profile?seconds=$PPROF_SECONDS" ||
			echo "latency.sh: CPU profile of $label failed" >&2) 8>&- &
		ppid=$!
	fi
	set +e
	# shellcheck disable=SC2086 # LAT_PROGRAM_ARGS: extra flags, split on spaces
	line="$("$LAT" ${LAT_PROGRAM_ARGS:-} -pg "$DSN" -brokers "$BROKERS" -label "$label" -rate "$rate" -duration "$duration" \
		-txn-size "$txn" -conns "$CONNS" -payload "$PAYLOAD" -drain "$DRAIN" -pid "$wpid" \
		-kafka-pid "$(cat "$WALRELAY_TEST_DIR/kafka/kafka.pid" 2>/dev/null || echo 0)" -slot walrelay_lat \
		-timeline "$WALRELAY_TEST_DIR/timeline-$label.csv" -raw "$WALRELAY_TEST_DIR/raw-$label.csv" 2>"$WALRELAY_TEST_DIR/latency-$label.err" 8>&-)"
	lrc=$?
	set -e
	cat "$WALRELAY_TEST_DIR/latency-$label.err" >&2
	[ -z "$ppid" ] || wait "$ppid" || true
	# Kafka record batches walrelay produced in the step (the warm-up pings included): how
	# well batching gathered records (franz-go's client metrics, walrelay_kafka_*).
	local batches
	batches="$(curl -sf "http://$addr/metrics" 2>/dev/null | awk '
		/^walrelay_kafka_produce_batches_total/ { b += $NF } /^walrelay_kafka_produce_records_total/ { r += $NF }
		END { if (b > 0) printf "kafka_batches=%d recs_per_batch=%.1f", b, r / b }')" || batches=""
	stop_walrelay
	# test/bench/floor prints the Postgres leg alone when it stops: into the report with the step.
	grep -h '^floor: commit' "$wlog" 2>/dev/null | sed "s/^floor:/latency: $label: floor:/" |
		tee -a "$WALRELAY_TEST_DIR/latency-$label.err" >&2 || true
	[ "$lrc" -eq 0 ] || problems+=("$label: latency program exit $lrc")
	[ "$WRC" = 0 ] || problems+=("$label: walrelay exit status after SIGTERM $WRC (log: $wlog)")
	STEP_LINE=""
	[ -z "$line" ] || STEP_LINE="$line $batches exit=$WRC"
}

# Warm-up, not in the table: the broker's JVM was just started.
WARMUP_LINE=""
if [ "$WARMUP" != 0 ]; then
	step warmup "$WARMUP_RATE" "$WARMUP" "$TXN_SIZE"
	WARMUP_LINE="$STEP_LINE"
fi

lines=() step_flags=() all_labels=()
declare -A seen_rate
for entry in "${RATES[@]}"; do
	r="${entry%%:*}"
	txn="$TXN_SIZE"
	if [[ "$r" == *x* ]]; then
		txn="${r#*x}"
		r="${r%%x*}"
	fi
	flags=""
	[[ "$entry" != *:* ]] || flags="${entry#*:}"
	flags="${flags//,/ }"
	# One topic per step: lat.<label> (r<rate>, r<rate>x<txn> when not LAT_TXN_SIZE); a step
	# listed twice gets <label>-2, ...
	base="r$r"
	[ "$txn" = "$TXN_SIZE" ] || base="r${r}x$txn"
	seen_rate[$base]=$((${seen_rate[$base]:-0} + 1))
	label="$base"
	[ "${seen_rate[$base]}" -eq 1 ] || label="$base-${seen_rate[$base]}"
	rate="$r"
	[ "$r" = max ] && rate=0
	all_labels+=("$label")
	step "$label" "$rate" "$DURATION" "$txn" "$flags"
	if [ -n "$STEP_LINE" ]; then
		lines+=("$STEP_LINE")
		step_flags+=("${flags:-(defaults)}")
	fi
done

# --- report -------------------------------------------------------------------------------
field() { # line key
	local kv
	for kv in $1; do
		[ "${kv%%=*}" = "$2" ] && { printf '%s\n' "${kv#*=}"; return; }
	done
	echo "-"
}
REPORT="$WALRELAY_TEST_DIR/latency-result.txt"
{
	echo
	echo "walrelay live latency: $DURATION per rate, $TXN_SIZE event(s)/txn unless the txn column says otherwise, $CONNS writer connections, payload ~$PAYLOAD B"
	echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); Postgres $("$WALRELAY_TEST_PGBIN/postgres" --version | awk '{print $3}'), Kafka ${WALRELAY_KAFKA_VERSION:-4.3.1} (1 broker, 3 partitions, same machine); walrelay $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- . ':!test/bench' 2>/dev/null || echo '+local changes')"
	[ -z "${LAT_WALRELAY_ARGS:-}" ] || echo "extra walrelay flags: $LAT_WALRELAY_ARGS"
	echo "latency = consumer receive - record timestamp (commit time, ms resolution); ms"
	fmtrow='%-6s %3s %8s %7s %7s | %6s %6s %6s %6s %7s | %6s %6s | %5s %5s %6s %6s %6s | %5s %5s %5s %5s | %7s %11s %6s | %s\n'
	cpus() { [ "$1" = - ] && echo - || awk -v p="$1" 'BEGIN { printf "%.1f", p * 0.6 }'; } # % of a core -> CPU-s/min
	# shellcheck disable=SC2059
	printf "$fmtrow" target txn achieved sent recv p50 p90 p99 p99.9 max "pg99" "aft99" \
		"wr%" "wr%mx" "cpus/m" RSS HWM "wsnd%" "wsR%" "kfk%" busy% "declag" "sockq mn/mx" "rec/b" "walrelay flags"
	for i in "${!lines[@]}"; do
		line="${lines[i]}"
		# shellcheck disable=SC2059
		printf "$fmtrow" \
			"$(field "$line" target_eps)" "$(field "$line" txn_size)" "$(field "$line" achieved_eps)" "$(field "$line" sent)" "$(field "$line" received)" \
			"$(field "$line" p50_ms)" "$(field "$line" p90_ms)" "$(field "$line" p99_ms)" "$(field "$line" p999_ms)" "$(field "$line" max_ms)" \
			"$(field "$line" pg_p99_ms)" "$(field "$line" after_p99_ms)" \
			"$(field "$line" cpu_avg_pct)" "$(field "$line" cpu_max_pct)" "$(cpus "$(field "$line" cpu_avg_pct)")" "$(field "$line" rss_max_mb)" "$(field "$line" hwm_mb)" \
			"$(field "$line" walsender_cpu_pct)" "$(field "$line" walsender_running_pct)" "$(field "$line" kafka_cpu_pct)" \
			"$(field "$line" sys_busy_pct)" "$(field "$line" decode_lag_max_kb)" \
			"$(field "$line" sockq_mean_kb)/$(field "$line" sockq_max_kb)" "$(field "$line" recs_per_batch)" "${step_flags[i]}"
	done
	echo "latencies in ms: p50..max from the commit timestamp (record timestamp) to the consumer's receive;"
	echo "pg99 / aft99: p99 of the two parts split where the walsender's sent_lsn (sampled every 10 ms) passed the event:"
	echo "commit -> decoded and sent by Postgres, and the rest (socket, walrelay, Kafka, consumer); each +-5 ms."
	echo "wr% / wr%mx: walrelay CPU (100 = one core), run average / highest 1 s sample; cpus/m: walrelay CPU-seconds per minute (run average); RSS / HWM: walrelay's VmRSS max and VmHWM, MB;"
	echo "wsnd% / kfk%: CPU of the slot's walsender and of the Kafka broker; busy%: whole machine ($(nproc) cores = 100);"
	echo "wsR%: share of 10 ms samples in which the walsender was running or waiting for a CPU (not sleeping);"
	echo "declag: highest sampled kB of WAL between pg_current_wal_lsn() and the walsender's decoding position;"
	echo "sockq mn/mx: mean / max kB sent by the walsender and not yet read by walrelay (kernel socket queues, 1 s samples);"
	echo "rec/b: records per Kafka record batch walrelay produced in the step (one batch per partition per produce request)."
	for p in "${problems[@]}"; do echo "PROBLEM: $p"; done
	for i in "${!lines[@]}"; do echo "${lines[i]} flags=${step_flags[i]// /,}"; done
	[ -z "$WARMUP_LINE" ] || echo "warm-up, not in the table: $WARMUP_LINE"
	echo
	for label in warmup "${all_labels[@]}"; do cat "$WALRELAY_TEST_DIR/latency-$label.err" 2>/dev/null || true; done
	if [ "$PPROF_SECONDS" -gt 0 ]; then
		echo "CPU profiles ($PPROF_SECONDS s each): go tool pprof -top $BIN $WALRELAY_TEST_DIR/pprof-<label>.pb.gz"
	fi
} | tee "$REPORT"

if [ -n "$RESULTS_DIR" ]; then
	mkdir -p "$RESULTS_DIR"
	cp "$REPORT" "$RESULTS_DIR/latency-$STAMP.txt"
	for f in "$WALRELAY_TEST_DIR"/timeline-*.csv "$WALRELAY_TEST_DIR"/pprof-*.pb.gz; do
		[ -f "$f" ] && cp "$f" "$RESULTS_DIR/latency-$STAMP-$(basename "$f")"
	done
	log "report saved to $RESULTS_DIR/latency-$STAMP.txt"
fi
[ "${#problems[@]}" -eq 0 ] || die "${problems[*]}"
