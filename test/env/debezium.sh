#!/usr/bin/env bash
# Kafka Connect standalone worker with Debezium's Postgres connector and the outbox EventRouter,
# for test/cutover_test.go (cutting over from a running Debezium). Jars from Maven Central.
#
#   debezium.sh fetch   resolve the worker jars into the cache (no-op when cached)
#   debezium.sh start   start the worker (no connectors: tests add them over the REST API); waits
#                       until GET / answers; idempotent
#   debezium.sh stop    SIGTERM and wait (SIGKILL after 60 s); no-op when not running
#   debezium.sh status  exit 0 when running, 3 when not
#   debezium.sh env     print `export ...` lines
#
# Environment:
#   WALRELAY_TEST_DIR                 state root (default /tmp/walrelay-test); the worker lives in ./debezium
#   WALRELAY_TEST_KAFKA_PORT          the test broker's port on 127.0.0.1 (default 59092)
#   WALRELAY_TEST_CONNECT_PORT        Connect REST port on 127.0.0.1 (default WALRELAY_TEST_KAFKA_PORT+8)
#   WALRELAY_TEST_CONNECT_FLUSH_MS    offset.flush.interval.ms (default 10000): how long Debezium
#                                     waits between offset commits, hence between slot confirmations
#   WALRELAY_DEBEZIUM_VERSION         io.debezium version (default 3.7.0.Final)
#   WALRELAY_CONNECT_VERSION          org.apache.kafka:connect-runtime version (default 4.3.1)
#   WALRELAY_CACHE                    jar cache (default $HOME/.cache/walrelay), outside the work tree
#   WALRELAY_TEST_CONNECT_HEAP        JVM heap flags (default "-Xms128m -Xmx512m")
#   WALRELAY_TEST_CONNECT_JVM_OPTS    JIT/GC flags (default "-XX:+UseSerialGC -XX:TieredStopAtLevel=1":
#                                     quick start for tests; test/bench/debezium.sh gives it
#                                     those of Kafka's own start scripts)
#   WALRELAY_TEST_CONNECT_START_TIMEOUT  seconds to wait for the REST API (default 180)
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=debezium

DBZ_VERSION="${WALRELAY_DEBEZIUM_VERSION:-3.7.0.Final}"
CONNECT_VERSION="${WALRELAY_CONNECT_VERSION:-4.3.1}"
KAFKA_PORT="${WALRELAY_TEST_KAFKA_PORT:-59092}"
REST_PORT="${WALRELAY_TEST_CONNECT_PORT:-$((KAFKA_PORT + 8))}"
REST="http://127.0.0.1:$REST_PORT"
FLUSH_MS="${WALRELAY_TEST_CONNECT_FLUSH_MS:-10000}"
CACHE_DIR="$(abs_path "${WALRELAY_CACHE:-$HOME/.cache/walrelay}")/debezium-$DBZ_VERSION-connect-$CONNECT_VERSION"
LIBS="$CACHE_DIR/libs"
STATE="$(abs_path "$WALRELAY_TEST_DIR")/debezium"
PIDFILE="$STATE/connect.pid"
PROPS="$STATE/worker.properties"
LOG4J="$STATE/log4j2.properties"
START_TIMEOUT="${WALRELAY_TEST_CONNECT_START_TIMEOUT:-180}"

fetch() {
	maven_jars "$LIBS" "$WALRELAY_ROOT/test/debezium/pom.xml" \
		"debezium-connector-postgres:$DBZ_VERSION + connect-runtime:$CONNECT_VERSION" \
		"debezium-connector-postgres-$DBZ_VERSION.jar debezium-connect-plugins-$DBZ_VERSION.jar connect-runtime-$CONNECT_VERSION.jar" \
		-Ddebezium.version="$DBZ_VERSION" -Dconnect.version="$CONNECT_VERSION"
}

write_config() {
	mkdir -p "$STATE/logs" "$STATE/tmp"
	cat >"$PROPS" <<EOC
# Written by test/env/debezium.sh on every start; edits are lost.
bootstrap.servers=127.0.0.1:$KAFKA_PORT
listeners=http://127.0.0.1:$REST_PORT
# The outbox EventRouter's key is the aggregate id and its value the payload text: strings on
# the wire, byte for byte what walrelay writes.
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
header.converter=org.apache.kafka.connect.storage.SimpleHeaderConverter
offset.storage.file.filename=$STATE/offsets.dat
# Debezium confirms its slot only when Connect commits offsets: this is how far behind it is.
offset.flush.interval.ms=$FLUSH_MS
offset.flush.timeout.ms=5000
task.shutdown.graceful.timeout.ms=10000
connector.client.config.override.policy=All
plugin.discovery=only_scan
EOC
	cat >"$LOG4J" <<EOC
status = warn
name = walrelay-test-connect
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $STATE/logs/connect.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = org.apache.kafka
logger.kafka.level = warn
logger.worker.name = org.apache.kafka.connect.runtime.WorkerSourceTask
logger.worker.level = info
logger.dbz.name = io.debezium
logger.dbz.level = info
EOC
}

# MARK: the worker's command line holds it (a recycled pid is not our worker).
MARK="ConnectStandalone $PROPS"

answers() { curl -fsS -m 5 "$REST/" >/dev/null 2>&1; }

cmd_start() {
	local pid t0=$SECONDS
	if pid="$(service_pid "$PIDFILE" "$MARK")"; then
		log "already running on $REST (pid $pid)"
		return
	fi
	fetch
	command -v curl >/dev/null || die "curl not found"
	wait_ports_free 10 "$REST_PORT"
	ensure_state_dir "$WALRELAY_TEST_DIR"
	mkdir -p "$STATE"
	write_config
	register debezium
	log "starting Kafka Connect $CONNECT_VERSION + Debezium $DBZ_VERSION on $REST (broker 127.0.0.1:$KAFKA_PORT)"
	local heap jvm java
	read -r -a heap <<<"${WALRELAY_TEST_CONNECT_HEAP:--Xms128m -Xmx512m}"
	read -r -a jvm <<<"${WALRELAY_TEST_CONNECT_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1}"
	java="$(java_bin)"
	spawn_service "$STATE" "$STATE/connect.out" "$PIDFILE" \
		"$java" "${heap[@]}" "${jvm[@]}" -XX:+ExitOnOutOfMemoryError \
		-XX:-UsePerfData -Djava.io.tmpdir="$STATE/tmp" -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="file:$LOG4J" -cp "$LIBS/*" \
		org.apache.kafka.connect.cli.ConnectStandalone "$PROPS"
	pid="$SERVICE_PID"
	await_service "Connect REST on $REST" "$pid" "$START_TIMEOUT" "$STATE/connect.out $STATE/logs/connect.log" \
		"$REST_PORT" answers
	log "ready on $REST (pid $pid) in $((SECONDS - t0)) s"
}

cmd_stop() { stop_service "$PIDFILE" "$MARK" 60; }
cmd_status() { service_status "debezium (connect)" "$REST" "$STATE" "$PIDFILE" "$MARK"; }

cmd_env() {
	emit_export WALRELAY_TEST_CONNECT "$REST"
	emit_export WALRELAY_TEST_CONNECT_LOG "$STATE/logs/connect.log"
}

case "${1:-}" in
fetch) fetch ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) cmd_env ;;
*)
	echo "usage: $0 fetch|start|stop|status|env" >&2
	exit 2
	;;
esac
