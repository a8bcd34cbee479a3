#!/usr/bin/env bash
# `make bench`: how fast walrelay drains a backlog compared with pg_recvlogical, over several
# runs on the same WAL, reported per run and as medians.
#
# Makes BENCH_RUNS pairs of fresh pgoutput slots (bench_recv_<i>, bench_walrelay_<i>), then
# pre-loads BENCH_N outbox rows once (payload ~BENCH_PAYLOAD bytes of jsonb text,
# BENCH_TXN_ROWS rows per transaction) behind all of them. Run i then drains pair i, back to
# back, alternating the order to cancel drift on a shared machine (odd i: pg_recvlogical
# first; even i: walrelay first):
#   - pg_recvlogical drains bench_recv_<i> to /dev/null up to the last transaction's end LSN;
#   - walrelay drains bench_walrelay_<i> to Kafka topic bench.run<i>; the clock stops when the
#     slot's confirmed_flush_lsn reaches that LSN, which walrelay only confirms once Kafka acked
#     every record (polled every 100 ms; walrelay runs with --status-interval 100ms), then
#     walrelay gets SIGTERM and must exit 0.
# Prints per run: seconds, events/s and WAL MB/s of both, walrelay's start-up share of its
# seconds (until its replication connection holds the slot), the run's ratio, walrelay's peak RSS
# (VmHWM just before SIGTERM), the Kafka record count of the run's topic (must be BENCH_N) and
# the 1-minute load average before the run (the machine is shared; a high one explains an
# outlier). Then the medians of each column and the median of the per-run ratios. Single runs
# on a shared 2-core machine swing by 3x: compare medians, and ratios within one run.
#
# Machine-readable lines (also in the saved report):
#   RUN i=<i> first=recv|walrelay recv_s=.. recv_eps=.. walrelay_s=.. walrelay_eps=..
#       walrelay_start_s=.. ratio=.. rss_mb=.. kafka_records=.. exit=.. load1=..
#   RESULT n=.. payload=.. pad=.. txn_rows=.. runs=.. wal_mb=.. load_s=.. recv_s_median=..
#       recv_eps_median=.. walrelay_s_median=.. walrelay_eps_median=.. walrelay_start_s_median=..
#       ratio_median=.. rss_mb_median=.. rss_mb_max=.. ok=0|1
#
# Payload: the jsonb is {"pad": "...", "seq": i}. BENCH_PAD=hex (default) fills the pad with hex
# text cut from 512 KiB of md5 output at a different offset per row, so neither Postgres' TOAST
# compression (pglz, from ~2 KB rows on) nor Kafka's lz4 can shrink it much: WAL and Kafka
# carry the payload's real size. BENCH_PAD=x repeats 'x' (the old behaviour): a 2 KB payload
# then compresses to almost nothing in WAL and Kafka.
#
# Postgres gets max_wal_size=16GB and checkpoint_timeout=1h (ALTER SYSTEM + reload, in the
# bench's own throwaway cluster) so that loading 1M x 2 KB (~2.5 GB of WAL, all of it kept by
# the slots) does not checkpoint every few hundred MB. Disk: about WAL + BENCH_RUNS x Kafka
# (N x payload each) under WALRELAY_BENCH_DIR; the script refuses to start without that space.
#
# Before run 1, walrelay drains a slot of its own (bench_warmup, made with the others) to topic
# bench.warmup until it is done or for at most BENCH_WARMUP seconds (30; 0 skips it), untimed, so the freshly started
# broker is warm for every run; and the load's dirty pages are synced, so their writeback does
# not land in run 1.
#
# Avro (BENCH_AVRO=1, the default; 0 skips it): each run also drains a third slot
# (bench_avro_<i>) with walrelay encoding every value in Avro through a schema registry
# (Apicurio, test/env/registry.sh, started in the bench's state dir) to topic bench.avro<i>, the
# schema {seq: long, pad: string} given by --schema-dir. The JSON and Avro drains alternate
# (odd runs: pg_recvlogical, JSON, Avro; even runs: Avro, JSON, pg_recvlogical), and the report
# adds per run and as medians: Avro seconds, events/s, the ratio Avro/JSON (events/s) and
# Avro's peak RSS.
#
# Knobs: BENCH_N (200000), BENCH_PAYLOAD (200), BENCH_PAD (hex|x), BENCH_TXN_ROWS (100),
# BENCH_RUNS (3, at most 9, or 6 with Avro: two or three slots each plus warm-up and probe
# within max_replication_slots=20), BENCH_WARMUP (30), BENCH_AVRO (1),
# BENCH_TIMEOUT (seconds for one walrelay drain, 900), BENCH_WALRELAY_ARGS (extra `walrelay
# run` flags; --slot and --topic are set per run after them), BENCH_RESULTS_DIR (where the
# report is saved as bench-<date>-n<N>-p<PAYLOAD>.txt, test/bench/results; empty: not saved),
# WALRELAY_BENCH_DIR (/tmp/walrelay-bench), WALRELAY_BENCH_PG_PORT (55452; free ports when taken),
# WALRELAY_BENCH_KAFKA_PORT (59112), WALRELAY_TEST_KAFKA_HEAP (broker heap, "-Xms1g -Xmx1g"),
# WALRELAY_BIN (bin/walrelay, built when missing),
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
RUNS="${BENCH_RUNS:-3}"
PAD_KIND="${BENCH_PAD:-hex}"
WARMUP_S="${BENCH_WARMUP:-30}"
[[ "$WARMUP_S" =~ ^[0-9]+$ ]] || die "BENCH_WARMUP must be a whole number of seconds, got '$WARMUP_S'"
for v in N PAYLOAD TXN_ROWS TIMEOUT RUNS; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, got '${!v}'"
done
AVRO="${BENCH_AVRO:-1}"
case "$AVRO" in 0 | 1) ;; *) die "BENCH_AVRO must be 0 or 1, got '$AVRO'" ;; esac
[ "$RUNS" -le $((AVRO ? 6 : 9)) ] || die "BENCH_RUNS must be at most 9, or 6 with BENCH_AVRO=1 (2 or 3 slots per run + warm-up + probe, max_replication_slots=20), got $RUNS"
case "$PAD_KIND" in hex | x) ;; *) die "BENCH_PAD must be hex or x, got '$PAD_KIND'" ;; esac
[ "$PAYLOAD" -le 400000 ] || die "BENCH_PAYLOAD must be at most 400000 (the hex pad is cut from 512 KiB), got $PAYLOAD"
# topic_of I [avro]: the Kafka topic of run I's walrelay drain (JSON, or Avro).
topic_of() { if [ "${2:-}" = avro ]; then printf 'bench.avro%s\n' "$1"; else printf 'bench.run%s\n' "$1"; fi; }

# shellcheck source=bench-env.sh
. "$WALRELAY_ROOT/test/bench/bench-env.sh"
BIN="$(abs_path "${WALRELAY_BIN:-bin/walrelay}")"
RESULT="$WALRELAY_TEST_DIR/result.txt"

fresh_state_dir "$WALRELAY_TEST_DIR"

# Rough disk need: WAL (payload + ~250 B of tuple, index and record overhead per row) plus
# one Kafka copy per run and one for the warm-up, plus 2 GB of slack.
need_mb=$(((N * (PAYLOAD + 250) * (RUNS + 2)) / 1000000 + 2000))
avail_mb="$(df -Pm "$WALRELAY_TEST_DIR" | awk 'NR == 2 {print $4}')"
[ "$avail_mb" -ge "$need_mb" ] || die "about $need_mb MB of disk needed under $WALRELAY_TEST_DIR, $avail_mb MB free"

bench_traps "bench" "Postgres and Kafka"

bench_start_services
# The schema registry of the Avro drains, and their schema: the bench payload's two fields.
if [ "$AVRO" = 1 ]; then
	"$WALRELAY_ENV_DIR/registry.sh" start 8>&-
	eval "$("$WALRELAY_ENV_DIR/registry.sh" env)"
	SCHEMA_DIR="$WALRELAY_TEST_DIR/schemas"
	mkdir -p "$SCHEMA_DIR"
	printf '%s\n' '{"type":"record","name":"BenchEvent","namespace":"walrelay.bench","fields":[{"name":"seq","type":"long"},{"name":"pad","type":"string"}]}' \
		>"$SCHEMA_DIR/public.outbox-value.avsc"
fi
load1() { cut -d' ' -f1 /proc/loadavg; }

# The binary is optional up to the walrelay drains: the recvlogical half is reported either way.
walrelay_problem=""
if [ ! -x "$BIN" ]; then
	log "building $BIN"
	mkdir -p "$(dirname "$BIN")"
	CGO_ENABLED=0 go build -o "$BIN" ./cmd/walrelay 8>&- || walrelay_problem="could not build ./cmd/walrelay"
fi

# --- settings, schema, publication and the slots, before any row exists --------------------
# Both are reloadable; postgresql.auto.conf is read after pg.sh's walrelay.conf.
psql_ -c "ALTER SYSTEM SET max_wal_size = '16GB'" -c "ALTER SYSTEM SET checkpoint_timeout = '1h'" \
	-c "SELECT pg_reload_conf()" >/dev/null
if [ -f migrations/001_outbox.sql ]; then
	psql_ -f migrations/001_outbox.sql
else
	psql_ -c "CREATE TABLE IF NOT EXISTS public.outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	  aggregate_type text NOT NULL, aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb,
	  headers jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now())"
fi
# 512 KiB of md5 output to cut hex pads from (unlogged: no WAL, and not published).
psql_ -c "CREATE UNLOGGED TABLE public.bench_pad AS
  SELECT string_agg(decode(md5(g::text), 'hex'), ''::bytea ORDER BY g) AS b FROM generate_series(1, 32768) AS g"
psql_ -c "CREATE PUBLICATION walrelay FOR TABLE public.outbox WITH (publish = 'insert')"
q "SELECT pg_create_logical_replication_slot('bench_warmup', 'pgoutput')" >/dev/null
for ((i = 1; i <= RUNS; i++)); do
	q "SELECT pg_create_logical_replication_slot('bench_recv_$i', 'pgoutput')" >/dev/null
	q "SELECT pg_create_logical_replication_slot('bench_walrelay_$i', 'pgoutput')" >/dev/null
	[ "$AVRO" = 0 ] || q "SELECT pg_create_logical_replication_slot('bench_avro_$i', 'pgoutput')" >/dev/null
done
START_LSN="$(q "SELECT min(confirmed_flush_lsn) FROM pg_replication_slots WHERE slot_name ~ '^bench_(recv|walrelay|avro)_'")"

# --- load ---------------------------------------------------------------------------------
TXNS=$(((N + TXN_ROWS - 1) / TXN_ROWS))
# jsonb text of {"pad": "…", "seq": 123456} is 26 bytes plus the pad for a 6-digit seq.
PAD=$((PAYLOAD > 26 ? PAYLOAD - 26 : 0))
log "loading $N rows in $TXNS transactions of up to $TXN_ROWS rows (pad: $PAD chars of $PAD_KIND)"
t0=$(now_ns)
bench_load_rows "$N" "$TXN_ROWS" "aggregate_type, aggregate_id, event_type, payload" \
	"'bench', 'agg-' || (i % 1024), 'BenchEvent', jsonb_build_object('seq', i, 'pad', $(bench_pad_expr "$PAD" "$PAD_KIND"))" walrelay
t1=$(now_ns)
LOAD_S="$(secs "$t0" "$t1")"
ROWS="$(q "SELECT count(*) FROM public.outbox")"
AVG_PAYLOAD="$(q "SELECT round(avg(octet_length(payload::text))) FROM (SELECT payload FROM public.outbox LIMIT 10000) AS s")"
WAL_BYTES="$(q "SELECT pg_wal_lsn_diff('$TARGET', '$START_LSN')::bigint")"
TABLE_MB="$(q "SELECT pg_total_relation_size('public.outbox') / 1000000")"
# Autovacuum would otherwise vacuum the fresh table (insert threshold) during the first runs,
# reading and writing GBs next to them: vacuum it now, untimed, and keep autovacuum off it.
t0=$(now_ns)
psql_ -c "ALTER TABLE public.outbox SET (autovacuum_enabled = false)" -c "VACUUM (ANALYZE) public.outbox"
VACUUM_S="$(secs "$t0" "$(now_ns)")"
t0=$(now_ns)
q "CHECKPOINT" >/dev/null
CKPT_S="$(secs "$t0" "$(now_ns)")"
[ "$ROWS" = "$N" ] || die "loaded $ROWS rows, expected $N"
log "loaded in $LOAD_S s (then vacuum $VACUUM_S s, checkpoint $CKPT_S s); WAL $START_LSN .. $TARGET ($((WAL_BYTES / 1000000)) MB); table $TABLE_MB MB; avg payload $AVG_PAYLOAD B"

# --- warm-up ------------------------------------------------------------------------------
# The broker's JVM was just started: the first walrelay drain was 25-30% slower than the
# later ones over its whole length (seen with 200k and 1M x 2 KB, also after a kcat warm-up).
# So walrelay drains slot bench_warmup to topic bench.warmup for up to BENCH_WARMUP seconds
# first (not timed). With 10 s (3/4 of a 1M x 2 KB drain), perf still showed the broker's C2
# compiler threads in 4-7% of all samples during runs 1 and 2, and run 1 stayed the slowest of
# five (ratios 0.69, then 0.97-1.00); 30 s lets the warm-up finish such a drain (0.85, then
# 0.94-0.99). Run 1 is still the lowest: compare medians.
if [ "$WARMUP_S" -gt 0 ] && [ -z "$walrelay_problem" ]; then
	log "warm-up: walrelay draining bench_warmup to Kafka topic bench.warmup for up to ${WARMUP_S}s"
	"$BIN" run --postgres-dsn "$DSN" --kafka-brokers "$BROKERS" --publication walrelay --heartbeat-interval 0 \
		--metrics-addr "" --slot bench_warmup --topic bench.warmup >"$WALRELAY_TEST_DIR/walrelay-warmup.log" 2>&1 8>&- </dev/null &
	wpid=$!
	echo "$wpid" >"$WPID_FILE"
	deadline=$((SECONDS + WARMUP_S))
	while [ "$SECONDS" -lt "$deadline" ] && pid_alive "$wpid" &&
		[ "$(q "SELECT confirmed_flush_lsn >= '$TARGET'::pg_lsn FROM pg_replication_slots WHERE slot_name = 'bench_warmup'")" != t ]; do
		sleep 0.2
	done
	terminate "$wpid" 60 || true
	wait "$wpid" 2>/dev/null || log "warm-up: walrelay exited with $? (log: $WALRELAY_TEST_DIR/walrelay-warmup.log)"
	wpid=""
	rm -f "$WPID_FILE"
	log "warm-up: done, slot at $(q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'bench_warmup'") of $TARGET"
fi
q "SELECT pg_drop_replication_slot('bench_warmup')" >/dev/null
# The load left GBs of dirty pages (WAL, table; fsync=off); their writeback would compete with
# run 1. Flush them now.
t0=$(now_ns)
dirty0="$(awk '/^Dirty:/ {printf "%.0f", $2 / 1024}' /proc/meminfo)"
sync -f "$WALRELAY_TEST_DIR" 2>/dev/null || sync
log "sync: $dirty0 MB dirty flushed in $(secs "$t0" "$(now_ns)") s"

# --- polling without forks ------------------------------------------------------------------
# The walrelay drain is timed by polling its slot every 0.1 s. A psql process (and a new backend)
# per poll, plus awk and sleep, cost about 10% of a core in perf samples on this 2-core machine,
# charged to walrelay's drain only (pg_recvlogical stops by itself at --endpos). So the polls go
# through one psql session (a coprocess), /proc is read with builtins, and the 0.1 s nap is a
# read timeout on a descriptor that never delivers.
coproc POLL { psql_ -At 2>&1 8>&-; }
exec {NAP_FD}<> <(:)
nap() { read -r -t 0.1 -u "$NAP_FD" _ || true; }
# poll SQL: one query on the coprocess session; its single-line answer in POLL_REPLY.
poll() {
	printf '%s;\n' "$1" >&"${POLL[1]}" || die "bench poller (psql coprocess) is gone"
	IFS= read -r -t 30 POLL_REPLY <&"${POLL[0]}" || die "bench poller (psql coprocess) did not answer: $1"
}
# proc_status PID: PROC_STATE (empty when gone) and PROC_HWM_KB (VmHWM) from /proc, no fork.
proc_status() {
	local k v rest
	PROC_STATE="" PROC_HWM_KB=""
	[ -r "/proc/$1/status" ] || return 0
	while read -r k v rest; do
		case "$k" in
		State:) PROC_STATE="$v" ;;
		VmHWM:) PROC_HWM_KB="$v" ;;
		esac
	done <"/proc/$1/status" 2>/dev/null || true
}

# --- drains -------------------------------------------------------------------------------
declare -A RECV_S WR_S WR_START WR_RSS_KB WR_RC KREC FIRST LOAD1

run_recv() { # i
	local i="$1" t0 t1
	log "run $i: pg_recvlogical draining bench_recv_$i to /dev/null (endpos $TARGET)"
	t0=$(now_ns)
	"$WALRELAY_TEST_PGBIN/pg_recvlogical" -d "$DSN" --slot "bench_recv_$i" --start --no-loop \
		-o proto_version=1 -o publication_names=walrelay -F 0 -f /dev/null --endpos "$TARGET" 8>&- ||
		die "pg_recvlogical failed (run $i)"
	t1=$(now_ns)
	RECV_S[$i]="$(secs "$t0" "$t1")"
	log "run $i: pg_recvlogical ${RECV_S[$i]} s"
}

# Kafka: sum of end offsets over the topic's partitions (idempotent, non-transactional
# producer: one offset per record). Empty when the topic does not exist. With
# --delivery=exactly-once every transaction also writes a commit marker that takes an offset,
# so the records are counted by reading the topic with isolation.level=read_committed (untimed).
kafka_records() { # topic
	local topic="$1" parts p qargs=()
	kcat -b "$BROKERS" -L -t "$topic" 2>/dev/null | grep -q 'partition 0' || return 0
	if [[ " ${BENCH_WALRELAY_ARGS:-} " == *"exactly-once"* ]]; then
		kcat -b "$BROKERS" -C -t "$topic" -o beginning -e -q -X isolation.level=read_committed -f 'x\n' | wc -l
		return 0
	fi
	mapfile -t parts < <(kcat -b "$BROKERS" -L -t "$topic" | awk '$1 == "partition" {sub(",", "", $2); print $2}')
	for p in "${parts[@]}"; do qargs+=(-t "$topic:$p:-1"); done
	kcat -b "$BROKERS" -Q "${qargs[@]}" | awk '{s += $NF} END {print s + 0}'
}

# run_walrelay I [avro]: run I's walrelay drain, of slot bench_walrelay_I (JSON, the payload as
# stored) or bench_avro_I (values encoded in Avro); its results under key I, or aI for Avro.
run_walrelay() { # i [avro]
	local i="$1" k="$1" slot="bench_walrelay_$1" extra=() t0 t1 deadline rc state log_file="$WALRELAY_TEST_DIR/walrelay-run$1.log"
	read -r -a extra <<<"${BENCH_WALRELAY_ARGS:-}"
	if [ "${2:-}" = avro ]; then
		k="a$i" slot="bench_avro_$i" log_file="$WALRELAY_TEST_DIR/walrelay-avro$i.log"
		extra+=(--schema-registry-url "$WALRELAY_TEST_SCHEMA_REGISTRY" --schema-dir "$SCHEMA_DIR")
	fi
	log "run $i: walrelay draining $slot to Kafka topic $(topic_of "$i" "${2:-}") (log: $log_file)"
	t0=$(now_ns)
	"$BIN" run --postgres-dsn "$DSN" --kafka-brokers "$BROKERS" \
		--publication walrelay --heartbeat-interval 0 --status-interval 100ms --metrics-addr "" \
		"${extra[@]}" --slot "$slot" --topic "$(topic_of "$i" "${2:-}")" >"$log_file" 2>&1 8>&- </dev/null &
	wpid=$!
	echo "$wpid" >"$WPID_FILE"
	deadline=$((SECONDS + TIMEOUT))
	while :; do
		poll "SELECT active::text || ' ' || (confirmed_flush_lsn >= '$TARGET'::pg_lsn)::text FROM pg_replication_slots WHERE slot_name = '$slot'"
		state="$POLL_REPLY"
		if [ "${state#* }" = true ]; then
			t1=$(now_ns)
			[ -n "${WR_START[$k]:-}" ] || WR_START[$k]="$(secs "$t0" "$t1")"
			break
		fi
		# Start-up: until walrelay's replication connection has the slot (Kafka and Postgres
		# connected, prerequisites checked); the topic is created later, at the first event.
		[ "${state% *}" != true ] || [ -n "${WR_START[$k]:-}" ] || WR_START[$k]="$(secs "$t0" "$(now_ns)")"
		proc_status "$wpid"
		[ -z "$PROC_HWM_KB" ] || WR_RSS_KB[$k]="$PROC_HWM_KB"
		if [ -z "$PROC_STATE" ] || [ "$PROC_STATE" = Z ]; then
			tail -n 20 "$log_file" >&2
			walrelay_problem="run $i: walrelay exited before confirming $TARGET"
			return 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 20 "$log_file" >&2
			walrelay_problem="run $i: walrelay did not confirm $TARGET within ${TIMEOUT}s (confirmed: $(q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$slot'"))"
			return 1
		fi
		nap
	done
	WR_S[$k]="$(secs "$t0" "$t1")"
	proc_status "$wpid"
	[ -z "$PROC_HWM_KB" ] || WR_RSS_KB[$k]="$PROC_HWM_KB"
	kill -TERM "$wpid"
	rc=0
	if wait_pid_gone "$wpid" 60; then
		wait "$wpid" || rc=$?
	else
		rc="no-exit-60s-after-SIGTERM"
		kill -KILL "$wpid" 2>/dev/null || true
	fi
	WR_RC[$k]="$rc"
	wpid=""
	rm -f "$WPID_FILE"
	log "run $i: walrelay ($slot) ${WR_S[$k]} s, exit after SIGTERM: $rc"
}

for ((i = 1; i <= RUNS; i++)); do
	LOAD1[$i]="$(load1)"
	if ((i % 2 == 1)); then
		FIRST[$i]=recv
		run_recv "$i"
		[ -n "$walrelay_problem" ] || run_walrelay "$i" || true
		[ -n "$walrelay_problem" ] || [ "$AVRO" = 0 ] || run_walrelay "$i" avro || true
	else
		FIRST[$i]=walrelay
		[ "$AVRO" = 0 ] || FIRST[$i]=avro
		[ -n "$walrelay_problem" ] || [ "$AVRO" = 0 ] || run_walrelay "$i" avro || true
		[ -n "$walrelay_problem" ] || run_walrelay "$i" || true
		run_recv "$i"
	fi
	KREC[$i]="$(kafka_records "$(topic_of "$i")")"
	[ "$AVRO" = 0 ] || KREC[a$i]="$(kafka_records "$(topic_of "$i" avro)")"
done

# --- report -------------------------------------------------------------------------------
rate() { awk -v n="$1" -v s="$2" 'BEGIN {if (s > 0) printf "%.0f", n / s; else print "-"}'; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN {if (s > 0) printf "%.1f", b / s / 1e6; else print "-"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a > 0 && b > 0) printf "%.2f", a / b; else print "-"}'; }
mb() { awk -v k="$1" 'BEGIN {if (k != "") printf "%.1f", k / 1024; else print "-"}'; }
# median V...: of the numeric arguments ("-" and empty ones skipped); "-" when none.
median() {
	printf '%s\n' "$@" | awk '$1 ~ /^[0-9.]+$/' | sort -g |
		awk '{a[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.6f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
maxof() { printf '%s\n' "$@" | awk '$1 ~ /^[0-9.]+$/' | sort -g | tail -n 1 | awk '{print} END {if (NR == 0) print "-"}'; }
fmt() { awk -v v="$1" -v f="$2" 'BEGIN {if (v == "-" || v == "") print "-"; else printf f, v}'; }

recv_eps=() wr_eps=() ratios=() rss_mb=() recv_ss=() wr_ss=() recv_mbs=() wr_mbs=() wr_starts=()
ok=1
for ((i = 1; i <= RUNS; i++)); do
	recv_ss+=("${RECV_S[$i]:-}")
	wr_ss+=("${WR_S[$i]:-}")
	wr_starts+=("${WR_START[$i]:--}")
	recv_eps+=("$(rate "$N" "${RECV_S[$i]:-0}")")
	wr_eps+=("$(rate "$N" "${WR_S[$i]:-0}")")
	recv_mbs+=("$(mbps "$WAL_BYTES" "${RECV_S[$i]:-0}")")
	wr_mbs+=("$(mbps "$WAL_BYTES" "${WR_S[$i]:-0}")")
	ratios+=("$(ratio "${RECV_S[$i]:-0}" "${WR_S[$i]:-0}")")
	rss_mb+=("$(mb "${WR_RSS_KB[$i]:-}")")
	[ -n "${WR_S[$i]:-}" ] && [ "${WR_RC[$i]:-}" = 0 ] && [ "${KREC[$i]:-}" = "$N" ] || ok=0
done
avro_ss=() avro_eps=() avro_ratios=() avro_rss=()
if [ "$AVRO" = 1 ]; then
	for ((i = 1; i <= RUNS; i++)); do
		avro_ss+=("${WR_S[a$i]:-}")
		avro_eps+=("$(rate "$N" "${WR_S[a$i]:-0}")")
		avro_ratios+=("$(ratio "${WR_S[$i]:-0}" "${WR_S[a$i]:-0}")")
		avro_rss+=("$(mb "${WR_RSS_KB[a$i]:-}")")
		[ -n "${WR_S[a$i]:-}" ] && [ "${WR_RC[a$i]:-}" = 0 ] && [ "${KREC[a$i]:-}" = "$N" ] || ok=0
	done
	med_avro="$(fmt "$(median "${avro_ratios[@]}")" %.2f)"
fi
[ -z "$walrelay_problem" ] || ok=0
med_ratio="$(fmt "$(median "${ratios[@]}")" %.2f)"
rss_max="$(maxof "${rss_mb[@]}")"
{
	echo
	echo "walrelay bench: N=$N events x $RUNS runs, payload ~$PAYLOAD B ($PAD_KIND pad; avg $AVG_PAYLOAD B jsonb text), $TXN_ROWS rows/txn, WAL $(mbps "$WAL_BYTES" 1) MB, table $TABLE_MB MB, load $LOAD_S s"
	echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); Postgres $("$WALRELAY_TEST_PGBIN/postgres" --version | awk '{print $3}'), Kafka ${WALRELAY_KAFKA_VERSION:-4.3.1} (1 broker, 3 partitions, same machine); walrelay $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- . ':!test/bench' 2>/dev/null || echo '+local changes')"
	[ -z "${BENCH_WALRELAY_ARGS:-}" ] || echo "extra walrelay flags: $BENCH_WALRELAY_ARGS"
	printf '%-6s %-8s | %8s %9s %7s | %8s %9s %7s %7s | %6s %7s %9s %5s\n' \
		run first "recv s" "recv ev/s" "MB/s" "wr s" "wr ev/s" "MB/s" "start s" ratio "RSS MB" kafka load1
	for ((i = 1; i <= RUNS; i++)); do
		printf '%-6s %-8s | %8s %9s %7s | %8s %9s %7s %7s | %6s %7s %9s %5s\n' \
			"$i" "${FIRST[$i]}" "${RECV_S[$i]:--}" "${recv_eps[i - 1]}" "${recv_mbs[i - 1]}" \
			"${WR_S[$i]:--}" "${wr_eps[i - 1]}" "${wr_mbs[i - 1]}" "${wr_starts[i - 1]}" "${ratios[i - 1]}" "${rss_mb[i - 1]}" \
			"${KREC[$i]:-none}" "${LOAD1[$i]}"
	done
	printf '%-6s %-8s | %8s %9s %7s | %8s %9s %7s %7s | %6s %7s\n' median "" \
		"$(fmt "$(median "${recv_ss[@]}")" %.3f)" "$(fmt "$(median "${recv_eps[@]}")" %.0f)" "$(fmt "$(median "${recv_mbs[@]}")" %.1f)" \
		"$(fmt "$(median "${wr_ss[@]}")" %.3f)" "$(fmt "$(median "${wr_eps[@]}")" %.0f)" "$(fmt "$(median "${wr_mbs[@]}")" %.1f)" \
		"$(fmt "$(median "${wr_starts[@]}")" %.2f)" "$med_ratio" "$(fmt "$(median "${rss_mb[@]}")" %.1f)"
	echo "(ratio = walrelay events/s / pg_recvlogical events/s within the run; the median ratio is the median of the per-run ratios)"
	echo "ratio walrelay/pg_recvlogical (events/s): $med_ratio (median of $RUNS runs: ${ratios[*]})"
	echo "walrelay peak RSS (VmHWM): $(fmt "$rss_max" '%.1f MB') (max of $RUNS runs: ${rss_mb[*]})"
	if [ "$AVRO" = 1 ]; then
		echo
		echo "walrelay with Avro values (Apicurio Registry ${WALRELAY_APICURIO_VERSION:-3.3.3}, --schema-dir: {seq: long, pad: string}) vs the JSON drain of the same run:"
		printf '%-6s %-8s | %8s %9s %7s | %8s %9s | %9s %7s %9s\n' run first "json s" "json ev/s" "RSS MB" "avro s" "avro ev/s" avro/json "RSS MB" kafka
		for ((i = 1; i <= RUNS; i++)); do
			printf '%-6s %-8s | %8s %9s %7s | %8s %9s | %9s %7s %9s\n' "$i" "${FIRST[$i]}" "${WR_S[$i]:--}" "${wr_eps[i - 1]}" "${rss_mb[i - 1]}" \
				"${WR_S[a$i]:--}" "${avro_eps[i - 1]}" "${avro_ratios[i - 1]}" "${avro_rss[i - 1]}" "${KREC[a$i]:-none}"
		done
		printf '%-6s %-8s | %8s %9s %7s | %8s %9s | %9s %7s\n' median "" \
			"$(fmt "$(median "${wr_ss[@]}")" %.3f)" "$(fmt "$(median "${wr_eps[@]}")" %.0f)" "$(fmt "$(median "${rss_mb[@]}")" %.1f)" \
			"$(fmt "$(median "${avro_ss[@]}")" %.3f)" "$(fmt "$(median "${avro_eps[@]}")" %.0f)" "$med_avro" "$(fmt "$(median "${avro_rss[@]}")" %.1f)"
		echo "ratio Avro/JSON (events/s): $med_avro (median of $RUNS runs: ${avro_ratios[*]})"
		echo "walrelay peak RSS (VmHWM) with Avro: $(fmt "$(maxof "${avro_rss[@]}")" '%.1f MB') (max of $RUNS runs: ${avro_rss[*]})"
		for ((i = 1; i <= RUNS; i++)); do
			verdict="OK"
			[ "${KREC[a$i]:-}" = "$N" ] || verdict="MISMATCH (expected $N)"
			echo "run $i: walrelay (Avro) exit status after SIGTERM: ${WR_RC[a$i]:-n/a}; Kafka $(topic_of "$i" avro): ${KREC[a$i]:-no topic} records: $verdict"
		done
		echo
	fi
	for ((i = 1; i <= RUNS; i++)); do
		rc="${WR_RC[$i]:-n/a}"
		verdict="OK"
		[ "${KREC[$i]:-}" = "$N" ] || verdict="MISMATCH (expected $N)"
		echo "run $i: walrelay exit status after SIGTERM: $rc; Kafka $(topic_of "$i"): ${KREC[$i]:-no topic} records: $verdict"
	done
	[ -z "$walrelay_problem" ] || echo "walrelay: $walrelay_problem"
	echo "(walrelay's time includes its start-up (\"start s\": until its replication connection holds the slot, polled every ~0.1 s;"
	echo " the topic is created after that, at the first event) and up to ~0.2 s of status interval + polling;"
	echo " pg_recvlogical's includes its connection. Short runs understate walrelay: prefer BENCH_N >= 1000000 for ratios.)"
	for ((i = 1; i <= RUNS; i++)); do
		echo "RUN i=$i first=${FIRST[$i]} recv_s=${RECV_S[$i]:--} recv_eps=${recv_eps[i - 1]} walrelay_s=${WR_S[$i]:--} walrelay_eps=${wr_eps[i - 1]} walrelay_start_s=${wr_starts[i - 1]} ratio=${ratios[i - 1]} rss_mb=${rss_mb[i - 1]} kafka_records=${KREC[$i]:-0} exit=${WR_RC[$i]:-n/a} load1=${LOAD1[$i]}"
		[ "$AVRO" = 0 ] || echo "AVRO i=$i avro_s=${WR_S[a$i]:--} avro_eps=${avro_eps[i - 1]} avro_json_ratio=${avro_ratios[i - 1]} avro_rss_mb=${avro_rss[i - 1]} kafka_records=${KREC[a$i]:-0} exit=${WR_RC[a$i]:-n/a}"
	done
	echo "RESULT n=$N payload=$PAYLOAD pad=$PAD_KIND txn_rows=$TXN_ROWS runs=$RUNS wal_mb=$(mbps "$WAL_BYTES" 1) load_s=$LOAD_S" \
		"recv_s_median=$(fmt "$(median "${recv_ss[@]}")" %.3f) recv_eps_median=$(fmt "$(median "${recv_eps[@]}")" %.0f)" \
		"walrelay_s_median=$(fmt "$(median "${wr_ss[@]}")" %.3f) walrelay_eps_median=$(fmt "$(median "${wr_eps[@]}")" %.0f)" \
		"walrelay_start_s_median=$(fmt "$(median "${wr_starts[@]}")" %.2f)" \
		"ratio_median=$med_ratio rss_mb_median=$(fmt "$(median "${rss_mb[@]}")" %.1f) rss_mb_max=$rss_max" \
		"${med_avro:+avro_s_median=$(fmt "$(median "${avro_ss[@]}")" %.3f) avro_eps_median=$(fmt "$(median "${avro_eps[@]}")" %.0f) avro_json_ratio_median=$med_avro avro_rss_mb_max=$(maxof "${avro_rss[@]}") }ok=$ok"
} | tee "$RESULT"

if [ -n "$RESULTS_DIR" ]; then
	mkdir -p "$RESULTS_DIR"
	saved="$RESULTS_DIR/bench-$(date +%Y%m%d-%H%M%S)-n$N-p$PAYLOAD.txt"
	cp "$RESULT" "$saved"
	log "report saved to $saved"
fi

[ -z "$walrelay_problem" ] || die "$walrelay_problem"
for ((i = 1; i <= RUNS; i++)); do
	[ "${WR_RC[$i]:-}" = 0 ] || die "run $i: walrelay exit status after SIGTERM: ${WR_RC[$i]:-none}"
	[ "${KREC[$i]:-}" = "$N" ] || die "run $i: Kafka holds ${KREC[$i]:-no} records for $(topic_of "$i"), expected $N"
	[ "$AVRO" = 0 ] || [ "${WR_RC[a$i]:-}" = 0 ] || die "run $i: walrelay (Avro) exit status after SIGTERM: ${WR_RC[a$i]:-none}"
	[ "$AVRO" = 0 ] || [ "${KREC[a$i]:-}" = "$N" ] || die "run $i: Kafka holds ${KREC[a$i]:-no} records for $(topic_of "$i" avro), expected $N"
done
