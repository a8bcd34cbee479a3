#!/usr/bin/env bash
# `make bench-debezium`: walrelay side by side with Debezium (Postgres connector 3.7 + outbox
# EventRouter on Kafka Connect standalone 4.3.1, jars from Maven Central via
# test/env/debezium.sh) on the bench's own Postgres, broker and rows. Results:
# docs/benchmarks-debezium.md.
#
# Same table and rows for every tool: Debezium's outbox table (id uuid, aggregatetype,
# aggregateid, type, payload jsonb), read by walrelay with --columns debezium, by Debezium with
# the EventRouter (key aggregateid, value the payload text through Connect's StringConverter,
# byte for byte what walrelay writes; headers id, event_type, aggregate_type as walrelay
# writes them). One publication (FOR TABLE public.outbox WITH (publish = 'insert')) and a
# pgoutput slot per tool and run, made by this script before the rows exist. Each tool writes
# to topics of its own prefix: walrelay --topic '<prefix>.{aggregate_type}', Debezium
# route.topic.replacement '<prefix>.${routedByValue}'.
#
# Debezium settings. "default": Debezium's and Connect's defaults, except what this setup needs:
# plugin.name=pgoutput, the slot, publication (autocreate disabled), table.include.list,
# snapshot.mode=no_data (stream from the slot; the default `initial` would read the backlog
# with SELECT instead of the WAL), the EventRouter and the string converters.
# "tuned": default plus DBZ_TUNED (below). offset.flush.interval.ms is a worker setting (one
# worker for both): Connect's default 60000 unless DBZ_FLUSH_MS; it only delays Debezium's
# slot confirmations, not what reaches Kafka. The worker's JVM gets the flags of Kafka's own
# connect-standalone.sh (G1, -Xms256m -Xmx2g), not the quick-start flags of the tests.
#
# (a) catch-up (DBZ_MODE contains catchup), for each payload of DBZ_PAYLOADS: DBZ_N rows
#     (DBZ_TXN_ROWS per transaction, hex pad as in test/bench/bench.sh) behind DBZ_RUNS x 4
#     slots, then per run, in an order rotated every run: pg_recvlogical (physical reference:
#     drains to /dev/null up to the last transaction's end LSN), walrelay, Debezium default,
#     Debezium tuned, each alone and from its own slot. Topics get LogAppendTime (broker-wide
#     default for this phase), so a drain ends at the broker-append time of its last record
#     (max over partitions of the last record's timestamp) and starts when the tool's
#     replication connection holds its slot (polled every 0.1 s); the time from launch (process
#     start, or the POST of the connector to the already running worker) to that is reported
#     apart as start-up. Before run 1 walrelay and tuned Debezium each drain a warm-up slot
#     (up to DBZ_WARMUP seconds, untimed): the broker's and the worker's JVMs start cold.
# (b) latency (DBZ_MODE contains latency): the worker is restarted (fresh peak RSS), Postgres
#     has track_commit_timestamp=on. test/bench/latency writes DBZ_LAT_RATE events/s, one per
#     transaction (LAT_TXN_SIZE), into the same table for DBZ_LAT_DURATION per step and
#     consumes every running tool's topic; latency = receive - the transaction's commit
#     timestamp from pg_xact_commit_timestamp (µs), the same reference for both tools (a
#     Debezium record's Kafka timestamp is its processing time, not the commit time). Steps,
#     repeated DBZ_LAT_REPEATS times after an untimed warm-up step (both tools, DBZ_LAT_WARMUP):
#       wr      walrelay alone            dd      Debezium default alone
#       dt      Debezium tuned alone      wr+dd   both on the same writes   wr+dt   likewise
#     Each step has fresh slots; walrelay is started per step, the connector is created per
#     step on the running worker. CPU = utime+stime of walrelay's / the worker JVM's
#     /proc/<pid>/stat over the program's run (warm-up pings and drain included), as
#     CPU-seconds per minute; RSS = VmRSS at the end of the step; HWM = VmHWM (walrelay: this
#     step; the JVM: since the restart before the latency phase).
#
# Output: tables on stdout, saved with the raw lines under BENCH_RESULTS_DIR; machine lines
#   CATCHUP payload=.. run=.. tool=.. n=.. start_s=.. drain_s=.. eps=.. mb_s=.. kafka=.. cpu_s=.. hwm_mb=..
#   LATSTEP step=.. rep=.. tool=.. prefix=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=.. cpu_s_per_min=.. rss_mb=.. hwm_mb=.. received=.. sent=..
#
# Knobs: DBZ_MODE ("catchup latency"), DBZ_N (200000), DBZ_PAYLOADS ("200 2000"),
# DBZ_TXN_ROWS (100), DBZ_RUNS (3, at most 4), DBZ_WARMUP (30), DBZ_TIMEOUT (900 s per drain),
# DBZ_LAT_RATE (1000), DBZ_LAT_DURATION (60s), DBZ_LAT_PAYLOAD (200), DBZ_LAT_REPEATS (1),
# DBZ_LAT_WARMUP (30s), DBZ_LAT_STEPS ("wr dd dt wr+dd wr+dt"), DBZ_TUNED (space-separated
# connector key=value, see below), DBZ_FLUSH_MS (60000), DBZ_WALRELAY_ARGS (extra walrelay run
# flags), BENCH_RESULTS_DIR (test/bench/results; empty: not saved), WALRELAY_BENCH_DIR
# (/tmp/walrelay-bench), WALRELAY_BENCH_PG_PORT (55452), WALRELAY_BENCH_KAFKA_PORT (59112;
# Connect REST on +8), WALRELAY_BIN (built when missing), WALRELAY_BENCH_KEEP=1.
set -euo pipefail
# shellcheck source=../env/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../env/common.sh"
WALRELAY_LOG_TAG=bench-debezium
cd "$WALRELAY_ROOT"

MODE="${DBZ_MODE:-catchup latency}"
N="${DBZ_N:-200000}"
read -r -a PAYLOADS <<<"${DBZ_PAYLOADS:-200 2000}"
TXN_ROWS="${DBZ_TXN_ROWS:-100}"
RUNS="${DBZ_RUNS:-3}"
WARMUP_S="${DBZ_WARMUP:-30}"
TIMEOUT="${DBZ_TIMEOUT:-900}"
LAT_RATE="${DBZ_LAT_RATE:-1000}"
LAT_DURATION="${DBZ_LAT_DURATION:-60s}"
LAT_PAYLOAD="${DBZ_LAT_PAYLOAD:-200}"
LAT_REPEATS="${DBZ_LAT_REPEATS:-1}"
LAT_WARMUP="${DBZ_LAT_WARMUP:-30s}"
read -r -a LAT_STEPS <<<"${DBZ_LAT_STEPS:-wr dd dt wr+dd wr+dt}"
FLUSH_MS="${DBZ_FLUSH_MS:-60000}"
# Tuned Debezium: bigger batches and queue, a 10 ms poll of its queue instead of 500 ms, and a
# producer like walrelay's (5 ms linger, 1 MiB batches) with lz4 compression.
TUNED="${DBZ_TUNED:-max.batch.size=8192 max.queue.size=32768 poll.interval.ms=10 producer.override.linger.ms=5 producer.override.batch.size=1048576 producer.override.compression.type=lz4}"
for v in N TXN_ROWS RUNS TIMEOUT LAT_RATE LAT_PAYLOAD LAT_REPEATS FLUSH_MS; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "DBZ_$v must be a positive whole number, got '${!v}'"
done
[[ "$WARMUP_S" =~ ^[0-9]+$ ]] || die "DBZ_WARMUP must be a whole number of seconds, got '$WARMUP_S'"
[ "$RUNS" -le 4 ] || die "DBZ_RUNS must be at most 4 (4 slots per run + 2 warm-up within max_replication_slots=20)"
for p in "${PAYLOADS[@]}"; do [[ "$p" =~ ^[1-9][0-9]*$ ]] && [ "$p" -le 400000 ] || die "DBZ_PAYLOADS: bad payload '$p'"; done
for s in "${LAT_STEPS[@]}"; do case "$s" in wr | dd | dt | wr+dd | wr+dt) ;; *) die "DBZ_LAT_STEPS: unknown step '$s'" ;; esac; done

# shellcheck source=bench-env.sh
. "$WALRELAY_ROOT/test/bench/bench-env.sh"
STAMP="$(date +%Y%m%d-%H%M%S)"
BIN="$(abs_path "${WALRELAY_BIN:-bin/walrelay}")"
export WALRELAY_TEST_CONNECT_HEAP="${WALRELAY_TEST_CONNECT_HEAP:--Xms256m -Xmx2g}"
export WALRELAY_TEST_CONNECT_JVM_OPTS="${WALRELAY_TEST_CONNECT_JVM_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent}"
export WALRELAY_TEST_CONNECT_FLUSH_MS="$FLUSH_MS"

fresh_state_dir "$WALRELAY_TEST_DIR"
LINES="$WALRELAY_TEST_DIR/lines.txt"
: >"$LINES"

bench_traps "bench" "Postgres, Kafka and Connect"

if [ ! -x "$BIN" ]; then
	log "building $BIN"
	mkdir -p "$(dirname "$BIN")"
	CGO_ENABLED=0 go build -o "$BIN" ./cmd/walrelay 8>&-
fi
LAT="$WALRELAY_TEST_DIR/latency"
go build -o "$LAT" ./test/bench/latency 8>&-

bench_start_services

# track_commit_timestamp needs a restart; the rest is reloadable (see bench.sh).
psql_ -c "ALTER SYSTEM SET track_commit_timestamp = on" -c "ALTER SYSTEM SET max_wal_size = '16GB'" \
	-c "ALTER SYSTEM SET checkpoint_timeout = '1h'" >/dev/null
"$WALRELAY_ENV_DIR/pg.sh" stop 8>&-
"$WALRELAY_ENV_DIR/pg.sh" start 8>&-
[ "$(q "SHOW track_commit_timestamp")" = on ] || die "track_commit_timestamp is not on after the restart"

# Debezium's outbox table; walrelay reads it with --columns debezium.
psql_ -c "CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)" \
	-c "CREATE PUBLICATION dbzbench FOR TABLE public.outbox WITH (publish = 'insert')" \
	-c "CREATE UNLOGGED TABLE public.bench_pad AS
  SELECT string_agg(decode(md5(g::text), 'hex'), ''::bytea ORDER BY g) AS b FROM generate_series(1, 32768) AS g"

KAFKA_LIBS="$(abs_path "${WALRELAY_CACHE:-$HOME/.cache/walrelay}")/kafka-${WALRELAY_KAFKA_VERSION:-4.3.1}/libs"
# broker_default KEY=VALUE | -KEY: set or delete a cluster-wide dynamic broker default.
broker_default() {
	local op=(--add-config "$1")
	[[ "$1" != -* ]] || op=(--delete-config "${1#-}")
	"$(java_bin)" -Xmx256m -cp "$KAFKA_LIBS/*" -Dlog4j2.level=warn kafka.admin.ConfigCommand --bootstrap-server "$BROKERS" \
		--entity-type brokers --entity-default --alter "${op[@]}" >"$WALRELAY_TEST_DIR/config-command.log" 2>&1 8>&- ||
		{ cat "$WALRELAY_TEST_DIR/config-command.log" >&2; die "kafka ConfigCommand $1 failed"; }
}

connect_start() {
	"$WALRELAY_ENV_DIR/debezium.sh" start 8>&-
	eval "$("$WALRELAY_ENV_DIR/debezium.sh" env)"
	REST="$WALRELAY_TEST_CONNECT"
	CONNECT_PID="$(cat "$WALRELAY_TEST_DIR/debezium/connect.pid")"
}

# --- process and slot helpers -------------------------------------------------------------
ticks() { # PID: utime+stime in clock ticks (empty when gone)
	local s
	s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
	s="${s##*) }"
	read -r -a f <<<"$s"
	echo $((f[11] + f[12]))
}
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null || true; }
mb() { awk -v k="$1" 'BEGIN {if (k != "") printf "%.0f", k / 1024; else print "-"}'; }
slot_active() { [ "$(q "SELECT active FROM pg_replication_slots WHERE slot_name = '$1'")" = t ]; }
# wait_active SLOT PID|connector: wait until the slot is held; ACTIVE_NS when seen.
wait_active() {
	local slot="$1" who="$2" deadline=$((SECONDS + 180))
	until slot_active "$slot"; do
		if [[ "$who" =~ ^[0-9]+$ ]]; then
			pid_alive "$who" || die "walrelay exited before holding slot $slot"
		else
			connector_failed "$who" && die "connector $who failed: $(curl -fsS "$REST/connectors/$who/status")"
		fi
		[ "$SECONDS" -lt "$deadline" ] || die "slot $slot not held within 180 s"
		sleep 0.1
	done
	ACTIVE_NS=$(now_ns)
}

start_walrelay() { # SLOT TOPIC_PREFIX LOG [--status-interval ...]
	local extra=()
	read -r -a extra <<<"${DBZ_WALRELAY_ARGS:-}"
	"$BIN" run --postgres-dsn "$DSN" --kafka-brokers "$BROKERS" --slot "$1" --publication dbzbench \
		--table public.outbox --columns debezium --topic "$2.{aggregate_type}" --metrics-addr "" \
		"${extra[@]}" >"$3" 2>&1 8>&- </dev/null &
	wpid=$!
	echo "$wpid" >"$WPID_FILE"
}
stop_walrelay() {
	local rc=0
	[ -n "$wpid" ] || return 0
	kill -TERM "$wpid" 2>/dev/null || true
	if wait_pid_gone "$wpid" 60; then wait "$wpid" || rc=$?; else
		rc=timeout
		kill -KILL "$wpid" 2>/dev/null || true
	fi
	wpid=""
	rm -f "$WPID_FILE"
	[ "$rc" = 0 ] || die "walrelay exit status after SIGTERM: $rc"
}

# connector_config NAME SLOT PREFIX default|tuned: the connector's JSON for POST /connectors.
connector_config() {
	local name="$1" slot="$2" prefix="$3" kind="$4" kv k v first=1
	local -a pairs=(
		"connector.class=io.debezium.connector.postgresql.PostgresConnector" "tasks.max=1"
		"plugin.name=pgoutput" "database.hostname=127.0.0.1" "database.port=$WALRELAY_TEST_PG_PORT"
		"database.user=postgres" "database.dbname=postgres" "topic.prefix=$name" "slot.name=$slot"
		"publication.name=dbzbench" "publication.autocreate.mode=disabled" "table.include.list=public.outbox"
		"snapshot.mode=no_data" "transforms=outbox" "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter"
		"transforms.outbox.route.topic.replacement=$prefix.\${routedByValue}"
		"transforms.outbox.table.fields.additional.placement=type:header:event_type,aggregatetype:header:aggregate_type"
	)
	if [ "$kind" = tuned ]; then
		read -r -a t <<<"$TUNED"
		pairs+=("${t[@]}")
	fi
	printf '{"name": "%s", "config": {' "$name"
	for kv in "${pairs[@]}"; do
		k="${kv%%=*}" v="${kv#*=}"
		[ "$first" = 1 ] || printf ', '
		first=0
		printf '"%s": "%s"' "$k" "$v"
	done
	printf '}}\n'
}
connector_failed() { curl -fsS "$REST/connectors/$1/status" 2>/dev/null | grep -q '"FAILED"'; }
create_connector() { # NAME SLOT PREFIX KIND
	local code
	code="$(connector_config "$@" | curl -sS -o "$WALRELAY_TEST_DIR/connect-post.out" -w '%{http_code}' \
		-H 'Content-Type: application/json' -X POST --data-binary @- "$REST/connectors")"
	[ "${code:0:1}" = 2 ] || die "create connector $1: HTTP $code $(cat "$WALRELAY_TEST_DIR/connect-post.out")"
}
delete_connector() { # NAME SLOT: delete and wait until the slot is released
	local deadline=$((SECONDS + 120))
	curl -fsS -X DELETE "$REST/connectors/$1" >/dev/null || die "delete connector $1 failed"
	while slot_active "$2"; do
		[ "$SECONDS" -lt "$deadline" ] || die "slot $2 still held 120 s after deleting connector $1"
		sleep 0.2
	done
}

# Kafka: records in a topic (sum of end offsets; no transactions here; -1 when kcat could not
# tell, e.g. a topic just auto-created without a leader yet) and the newest record timestamp
# over its partitions (ms).
kafka_count() {
	local parts p qargs=() out
	mapfile -t parts < <(kcat -b "$BROKERS" -L -t "$1" 2>/dev/null | awk '$1 == "partition" {sub(",", "", $2); print $2}' || true)
	[ "${#parts[@]}" -gt 0 ] || { echo 0; return 0; }
	for p in "${parts[@]}"; do qargs+=(-t "$1:$p:-1"); done
	out="$(kcat -b "$BROKERS" -Q "${qargs[@]}" 2>/dev/null)" || { echo -1; return 0; }
	awk -v want="${#parts[@]}" '$NF ~ /^[0-9]+$/ {s += $NF; k++} END {print (k == want ? s : -1)}' <<<"$out"
}
kafka_last_ts() {
	local p best=0 ts
	for p in $(kcat -b "$BROKERS" -L -t "$1" 2>/dev/null | awk '$1 == "partition" {sub(",", "", $2); print $2}' || true); do
		ts="$(kcat -b "$BROKERS" -C -t "$1" -p "$p" -o -1 -c 1 -e -q -f '%T\n' 2>/dev/null | tail -n 1 || true)"
		[[ "$ts" =~ ^[0-9]+$ ]] && [ "$ts" -gt "$best" ] && best="$ts"
	done
	echo "$best"
}

# --- catch-up -----------------------------------------------------------------------------
CATCHUP_TABLE="$WALRELAY_TEST_DIR/catchup.txt"
: >"$CATCHUP_TABLE"
TOOLS=(recv wr dd dt)

# drain_kafka TOOL SLOT TOPIC_PREFIX LABEL: launch the tool on SLOT, wait for N records in
# <prefix>.bench, print the CATCHUP line.
drain_kafka() {
	local tool="$1" slot="$2" prefix="$3" label="$4" t0 ticks0 n=0 deadline last_ms drain start pid hwm=""
	t0=$(now_ns)
	if [ "$tool" = wr ]; then
		start_walrelay "$slot" "$prefix" "$WALRELAY_TEST_DIR/walrelay-$label.log"
		pid="$wpid"
		wait_active "$slot" "$wpid"
	else
		pid="$CONNECT_PID"
		ticks0="$(ticks "$pid")"
		create_connector "$label" "$slot" "$prefix" "$([ "$tool" = dd ] && echo default || echo tuned)"
		wait_active "$slot" "$label"
	fi
	[ "$tool" != wr ] || ticks0=0 # a new process: its start-up counts, as the connector's does
	start="$(secs "$t0" "$ACTIVE_NS")"
	deadline=$((SECONDS + TIMEOUT))
	while n="$(kafka_count "$prefix.bench")" && [ "$n" -lt "$N" ]; do
		[ "$SECONDS" -lt "$deadline" ] || die "$label: $n of $N records after ${TIMEOUT}s"
		if [ "$tool" = wr ]; then pid_alive "$wpid" || die "$label: walrelay exited"; else
			! connector_failed "$label" || die "$label: connector failed"
		fi
		sleep 0.5
	done
	[ "$n" = "$N" ] || die "$label: Kafka holds $n records in $prefix.bench, expected $N"
	local cpu_s
	cpu_s="$(awk -v a="$ticks0" -v b="$(ticks "$pid")" 'BEGIN {printf "%.1f", (b - a) / 100}')"
	[ "$tool" != wr ] || hwm="$(mb "$(status_kb "$pid" VmHWM)")"
	last_ms="$(kafka_last_ts "$prefix.bench")"
	drain="$(awk -v a="$ACTIVE_NS" -v b="$last_ms" 'BEGIN {printf "%.3f", (b * 1e6 - a) / 1e9}')"
	if [ "$tool" = wr ]; then stop_walrelay; else delete_connector "$label" "$slot"; fi
	[ "$tool" = wr ] || hwm="$(mb "$(status_kb "$pid" VmHWM)")"
	DRAIN_LINE="tool=$tool n=$N start_s=$start drain_s=$drain eps=$(awk -v n="$N" -v s="$drain" 'BEGIN {printf "%.0f", n / s}') mb_s=$(awk -v b="$WAL_BYTES" -v s="$drain" 'BEGIN {printf "%.1f", b / s / 1e6}') kafka=$n cpu_s=$cpu_s hwm_mb=$hwm"
}

drain_recv() { # SLOT
	local t0 t1 s
	t0=$(now_ns)
	"$WALRELAY_TEST_PGBIN/pg_recvlogical" -d "$DSN" --slot "$1" --start --no-loop \
		-o proto_version=1 -o publication_names=dbzbench -F 0 -f /dev/null --endpos "$TARGET" 8>&- ||
		die "pg_recvlogical failed ($1)"
	t1=$(now_ns)
	s="$(secs "$t0" "$t1")"
	DRAIN_LINE="tool=recv n=$N start_s=0 drain_s=$s eps=$(awk -v n="$N" -v s="$s" 'BEGIN {printf "%.0f", n / s}') mb_s=$(awk -v b="$WAL_BYTES" -v s="$s" 'BEGIN {printf "%.1f", b / s / 1e6}') kafka=- cpu_s=- hwm_mb=-"
}

load_rows() { # PAYLOAD: DBZ_N rows behind the slots; sets TARGET, WAL_BYTES
	local payload="$1" start_lsn
	start_lsn="$(q "SELECT pg_current_wal_lsn()")"
	bench_load_rows "$N" "$TXN_ROWS" "id, aggregatetype, aggregateid, type, payload" \
		"gen_random_uuid(), 'bench', 'agg-' || (i % 1024), 'BenchEvent', jsonb_build_object('seq', i, 'pad', $(bench_pad_expr $((payload > 26 ? payload - 26 : 0)) hex))" dbzbench
	WAL_BYTES="$(q "SELECT pg_wal_lsn_diff('$TARGET', '$start_lsn')::bigint")"
	psql_ -c "ALTER TABLE public.outbox SET (autovacuum_enabled = false)" -c "VACUUM (ANALYZE) public.outbox" -c "CHECKPOINT"
	sync -f "$WALRELAY_TEST_DIR" 2>/dev/null || sync
}

drop_slots() { q "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE NOT active" >/dev/null; }

catchup() {
	local payload i k tool slot label order avg
	broker_default log.message.timestamp.type=LogAppendTime
	for payload in "${PAYLOADS[@]}"; do
		drop_slots
		q "TRUNCATE public.outbox" >/dev/null
		q "SELECT pg_create_logical_replication_slot('wu_wr', 'pgoutput'), pg_create_logical_replication_slot('wu_dbz', 'pgoutput')" >/dev/null
		for ((i = 1; i <= RUNS; i++)); do
			for tool in "${TOOLS[@]}"; do q "SELECT pg_create_logical_replication_slot('c_${tool}_$i', 'pgoutput')" >/dev/null; done
		done
		log "payload $payload: loading $N rows ($TXN_ROWS per transaction)"
		load_rows "$payload"
		avg="$(q "SELECT round(avg(octet_length(payload::text))) FROM (SELECT payload FROM public.outbox LIMIT 10000) AS s")"
		log "payload $payload: WAL $((WAL_BYTES / 1000000)) MB, avg payload $avg B"
		if [ "$WARMUP_S" -gt 0 ]; then
			log "warm-up: walrelay and tuned Debezium drain for up to ${WARMUP_S}s each (untimed)"
			start_walrelay wu_wr "wu$payload.wr" "$WALRELAY_TEST_DIR/walrelay-warmup-$payload.log"
			wait_active wu_wr "$wpid"
			local end=$((SECONDS + WARMUP_S))
			while [ "$SECONDS" -lt "$end" ] && [ "$(kafka_count "wu$payload.wr.bench")" -lt "$N" ]; do sleep 1; done
			stop_walrelay
			create_connector "wu$payload" wu_dbz "wu$payload.dbz" tuned
			wait_active wu_dbz "wu$payload"
			end=$((SECONDS + WARMUP_S))
			while [ "$SECONDS" -lt "$end" ] && [ "$(kafka_count "wu$payload.dbz.bench")" -lt "$N" ]; do sleep 1; done
			delete_connector "wu$payload" wu_dbz
		fi
		for ((i = 1; i <= RUNS; i++)); do
			order=()
			for ((k = 0; k < ${#TOOLS[@]}; k++)); do order+=("${TOOLS[(k + i - 1) % ${#TOOLS[@]}]}"); done
			for tool in "${order[@]}"; do
				slot="c_${tool}_$i"
				label="p${payload}r${i}$tool"
				log "payload $payload run $i: $tool draining $slot"
				if [ "$tool" = recv ]; then drain_recv "$slot"; else drain_kafka "$tool" "$slot" "$label" "$label"; fi
				echo "CATCHUP payload=$payload avg_payload=$avg wal_mb=$((WAL_BYTES / 1000000)) run=$i order=$(
					IFS=,
					echo "${order[*]}"
				) load1=$(cut -d' ' -f1 /proc/loadavg) $DRAIN_LINE" | tee -a "$LINES" >&2
			done
		done
	done
	broker_default -log.message.timestamp.type
}

# --- latency ------------------------------------------------------------------------------
# lat_step LABEL KIND REP DURATION: one latency step (KIND: wr, dd, dt, wr+dd, wr+dt).
lat_step() {
	local label="$1" kind="$2" rep="$3" duration="$4" args=() wr=0 dbz="" line lrc t0 t1 wt0="" ct0="" wmin
	[[ "$kind" != wr* ]] || wr=1
	case "$kind" in *dd) dbz=default ;; *dt) dbz=tuned ;; esac
	if [ "$wr" = 1 ]; then
		q "SELECT pg_create_logical_replication_slot('l_wr_$label', 'pgoutput')" >/dev/null
		start_walrelay "l_wr_$label" wr "$WALRELAY_TEST_DIR/walrelay-$label.log"
		wait_active "l_wr_$label" "$wpid"
		args+=(-topic-prefix wr -pid "$wpid" -slot "l_wr_$label")
	fi
	if [ -n "$dbz" ]; then
		q "SELECT pg_create_logical_replication_slot('l_dbz_$label', 'pgoutput')" >/dev/null
		create_connector "l$label" "l_dbz_$label" dbz "$dbz"
		wait_active "l_dbz_$label" "l$label"
		if [ "$wr" = 1 ]; then args+=(-also-topic-prefix dbz); else args+=(-topic-prefix dbz -pid "$CONNECT_PID" -slot "l_dbz_$label"); fi
	fi
	log "latency step $label ($kind): writing $LAT_RATE ev/s for $duration"
	[ "$wr" = 0 ] || wt0="$(ticks "$wpid")"
	[ -z "$dbz" ] || ct0="$(ticks "$CONNECT_PID")"
	t0=$(now_ns)
	set +e
	line="$("$LAT" -pg "$DSN" -brokers "$BROKERS" -label "$label" -rate "$LAT_RATE" -duration "$duration" \
		-txn-size "${LAT_TXN_SIZE:-1}" -conns 4 -payload "$LAT_PAYLOAD" -drain 180s -table public.outbox -columns debezium -commit-ts \
		-kafka-pid "$(cat "$WALRELAY_TEST_DIR/kafka/kafka.pid" 2>/dev/null || echo 0)" "${args[@]}" \
		2>"$WALRELAY_TEST_DIR/latency-$label.err" 8>&-)"
	lrc=$?
	set -e
	t1=$(now_ns)
	wmin="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print (b - a) / 6e10}')"
	cat "$WALRELAY_TEST_DIR/latency-$label.err" >&2
	[ "$lrc" -eq 0 ] || die "latency program failed in step $label (exit $lrc)"
	printf '%s\n' "$line" >>"$WALRELAY_TEST_DIR/latency-lines.txt"
	local x prefix pid t00 tool cpu rss hwm
	while read -r x; do
		[[ "$x" == LATX* ]] || continue
		prefix="$(sed -n 's/.* prefix=\([^ ]*\).*/\1/p' <<<"$x")"
		if [ "$prefix" = wr ]; then pid="$wpid" t00="$wt0" tool=walrelay; else pid="$CONNECT_PID" t00="$ct0" tool="dbz-$dbz"; fi
		cpu="$(awk -v a="$t00" -v b="$(ticks "$pid")" -v m="$wmin" 'BEGIN {printf "%.1f", (b - a) / 100 / m}')"
		rss="$(mb "$(status_kb "$pid" VmRSS)")"
		hwm="$(mb "$(status_kb "$pid" VmHWM)")"
		echo "LATSTEP step=$kind rep=$rep tool=$tool $(sed 's/^LATX //' <<<"$x") cpu_s_per_min=$cpu rss_mb=$rss hwm_mb=$hwm load1=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$LINES" >&2
	done <<<"$line"
	[ "$wr" = 0 ] || stop_walrelay
	[ -z "$dbz" ] || delete_connector "l$label" "l_dbz_$label"
	drop_slots
}

latency() {
	local rep s label
	if [ "$CATCHUP_RAN" = 1 ]; then
		"$WALRELAY_ENV_DIR/debezium.sh" stop 8>&-
		connect_start
	fi
	drop_slots
	q "TRUNCATE public.outbox" >/dev/null
	q "CHECKPOINT" >/dev/null
	if [ "$LAT_WARMUP" != 0 ]; then
		lat_step warm wr+dt 0 "$LAT_WARMUP" >/dev/null
		sed -i '/ rep=0 /d' "$LINES"
	fi
	for ((rep = 1; rep <= LAT_REPEATS; rep++)); do
		for s in "${LAT_STEPS[@]}"; do
			label="r${rep}${s//+/}"
			lat_step "$label" "$s" "$rep" "$LAT_DURATION"
		done
	done
}

connect_start
CATCHUP_RAN=0
[[ " $MODE " != *" catchup "* ]] || { catchup && CATCHUP_RAN=1; }
[[ " $MODE " != *" latency "* ]] || latency

# --- report (test/bench/debezium-report.sh; INFO lines carry the context) -----------------
{
	echo "INFO date=$(date -u +%Y-%m-%dT%H:%MZ)"
	echo "INFO machine=$(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); $(uname -sr)"
	echo "INFO versions=Postgres $("$WALRELAY_TEST_PGBIN/postgres" --version | awk '{print $3}'), Kafka ${WALRELAY_KAFKA_VERSION:-4.3.1} (1 broker, 3 partitions), Connect ${WALRELAY_CONNECT_VERSION:-4.3.1} + Debezium ${WALRELAY_DEBEZIUM_VERSION:-3.7.0.Final}, $("$(java_bin)" -version 2>&1 | head -n 1), walrelay $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- . ':!test/bench' ':!docs' 2>/dev/null || echo '+local changes'), $(go version | awk '{print $3}')"
	echo "INFO debezium=tuned = default + $TUNED; worker offset.flush.interval.ms=$FLUSH_MS; JVM $WALRELAY_TEST_CONNECT_HEAP $WALRELAY_TEST_CONNECT_JVM_OPTS"
	[ -z "${DBZ_WALRELAY_ARGS:-}" ] || echo "INFO walrelay=extra flags: $DBZ_WALRELAY_ARGS"
	echo "INFO catchup=$N rows, $TXN_ROWS per transaction, $RUNS runs (order rotated per run)"
	echo "INFO latency=$LAT_RATE events/s, ${LAT_TXN_SIZE:-1} event(s)/txn, $LAT_DURATION per step, payload ~$LAT_PAYLOAD B, $LAT_REPEATS repeat(s)"
} >>"$LINES"
REPORT="$WALRELAY_TEST_DIR/report.txt"
bash "$WALRELAY_ROOT/test/bench/debezium-report.sh" "$LINES" | tee "$REPORT"
if [ -n "$RESULTS_DIR" ]; then
	mkdir -p "$RESULTS_DIR"
	cp "$REPORT" "$RESULTS_DIR/debezium-$STAMP.txt"
	log "report saved to $RESULTS_DIR/debezium-$STAMP.txt"
fi
