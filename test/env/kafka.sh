#!/usr/bin/env bash
# Single-node Apache Kafka (KRaft, broker+controller) for walrelay's tests, from Maven Central jars.
#
#   kafka.sh fetch    resolve the broker jars into the cache (no-op when cached)
#   kafka.sh start    format storage (first time) and start; idempotent; waits until it answers
#   kafka.sh stop     SIGTERM and wait (SIGKILL after 60 s); no-op when not running
#   kafka.sh kill     SIGKILL the broker (fault tests); data stays
#   kafka.sh restart  stop if running, then start again with the same data
#   kafka.sh status   exit 0 when running, 3 when not
#   kafka.sh env      print `export ...` lines (eval "$(test/env/kafka.sh env)")
#
# Environment:
#   WALRELAY_TEST_DIR            state root (default /tmp/walrelay-test); the broker lives in ./kafka
#   WALRELAY_TEST_KAFKA_PORT     PLAINTEXT port on 127.0.0.1 (default: the port of the last start in
#                                this state dir, else 59092, or a free block when 59092..59101 is
#                                not free); CONTROLLER uses port+1
#   WALRELAY_KAFKA_VERSION       org.apache.kafka:kafka_2.13 version (default 4.3.1)
#   WALRELAY_CACHE               jar cache (default $HOME/.cache/walrelay), outside the work tree
#   WALRELAY_TEST_KAFKA_HEAP     JVM heap flags (default "-Xms256m -Xmx512m")
#   WALRELAY_TEST_KAFKA_START_TIMEOUT  seconds to wait for the broker (default 120)
#   WALRELAY_TEST_KAFKA_SECURE   1: also listen with SASL_SSL on port+2 (SCRAM-SHA-512, PLAIN,
#                                OAUTHBEARER unsecured JWS) and SSL with client certificates
#                                required on port+3; a throwaway CA, certificates and users
#                                are created in ./kafka/secure (remembered for restarts);
#                                SCRAM sessions must re-authenticate every 5 s
#                                (connections.max.reauth.ms, for credential rotation tests)
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=kafka

KAFKA_VERSION="${WALRELAY_KAFKA_VERSION:-4.3.1}"
CACHE_DIR="$(abs_path "${WALRELAY_CACHE:-$HOME/.cache/walrelay}")/kafka-$KAFKA_VERSION"
LIBS="$CACHE_DIR/libs"
STATE="$(abs_path "$WALRELAY_TEST_DIR")/kafka"
DATA="$STATE/data"
PIDFILE="$STATE/kafka.pid"
PROPS="$STATE/server.properties"
LOG4J="$STATE/log4j2.properties"
START_TIMEOUT="${WALRELAY_TEST_KAFKA_START_TIMEOUT:-120}"
SECURE="$STATE/secure"
# The port: WALRELAY_TEST_KAFKA_PORT, else the one this state dir's broker was last started on
# (./kafka/port), else 59092, or a free block when 59092..59101 is not free at the first start.
KAFKA_PORT_FILE="$STATE/port"
KAFKA_PORT_GIVEN="${WALRELAY_TEST_KAFKA_PORT:-$(cat "$KAFKA_PORT_FILE" 2>/dev/null || true)}"
set_ports() {
	KAFKA_PORT="$1"
	KAFKA_CONTROLLER_PORT="$((KAFKA_PORT + 1))"
	KAFKA_ADDR="127.0.0.1:$KAFKA_PORT"
	KAFKA_SASL_SSL_ADDR="127.0.0.1:$((KAFKA_PORT + 2))"
	KAFKA_SSL_ADDR="127.0.0.1:$((KAFKA_PORT + 3))"
}
set_ports "${KAFKA_PORT_GIVEN:-59092}"

# secure_on: the broker has (or is to get) the SASL_SSL and SSL listeners.
secure_on() { [ "${WALRELAY_TEST_KAFKA_SECURE:-0}" = 1 ] || [ -f "$SECURE/enabled" ]; }

# secure_setup: a throwaway CA, the broker's PEM key store, a client certificate for mTLS
# and random passwords for the SCRAM and PLAIN users (created once per state dir).
secure_setup() {
	[ -f "$SECURE/enabled" ] && return
	command -v openssl >/dev/null || die "openssl not found"
	mkdir -p "$SECURE"
	(
		cd "$SECURE"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 -subj /CN=walrelay-test-ca
		for n in broker client; do
			openssl req -newkey rsa:2048 -nodes -keyout "$n.key" -out "$n.csr" -subj "/CN=walrelay-test-$n"
			openssl x509 -req -in "$n.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 -out "$n.pem" \
				-extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n')
		done
		cat broker.key broker.pem ca.pem >broker-keystore.pem
		printf 'walrelay\n' >scram-user
		printf 'plainuser\n' >plain-user
		openssl rand -hex 16 >scram-password
		openssl rand -hex 16 >plain-password
	) >"$STATE/secure.log" 2>&1 || { cat "$STATE/secure.log" >&2; die "creating test certificates failed"; }
	: >"$SECURE/enabled"
}

# secure_config: the server.properties lines of the secured listeners.
secure_config() {
	cat <<EOF
ssl.keystore.type=PEM
ssl.keystore.location=$SECURE/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$SECURE/ca.pem
listener.name.ssl.ssl.client.auth=required
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.connections.max.reauth.ms=5000
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$(cat "$SECURE/plain-user")="$(cat "$SECURE/plain-password")";
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="walrelay-broker";
EOF
}

fetch() {
	maven_jars "$LIBS" "$WALRELAY_ROOT/test/pom.xml" "org.apache.kafka:kafka_2.13:$KAFKA_VERSION" \
		"kafka_2.13-$KAFKA_VERSION.jar" -Dkafka.version="$KAFKA_VERSION"
}

# jvm_cmd: the java command line (without main class) in the global array JVM.
jvm_cmd() {
	local heap
	read -r -a heap <<<"${WALRELAY_TEST_KAFKA_HEAP:--Xms256m -Xmx512m}"
	# java.io.tmpdir: lz4/zstd/snappy unpack native libraries there; keep them in the state dir.
	# -XX:-UsePerfData: no /tmp/hsperfdata_* files.
	mkdir -p "$STATE/tmp"
	JVM=("$(java_bin)" "${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError
		-XX:-UsePerfData -Djava.io.tmpdir="$STATE/tmp" -Djava.awt.headless=true
		-Dkafka.logs.dir="$STATE/logs" -Dlog4j2.configurationFile="file:$LOG4J" -cp "$LIBS/*")
}

jvm() {
	jvm_cmd
	"${JVM[@]}" "$@"
}

write_config() {
	mkdir -p "$DATA" "$STATE/logs"
	local listeners="PLAINTEXT://$KAFKA_ADDR,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT" advertised="PLAINTEXT://$KAFKA_ADDR"
	local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
	if secure_on; then
		listeners+=",SASL_SSL://$KAFKA_SASL_SSL_ADDR,SSL://$KAFKA_SSL_ADDR"
		advertised+=",SASL_SSL://$KAFKA_SASL_SSL_ADDR,SSL://$KAFKA_SSL_ADDR"
		protocols+=",SASL_SSL:SASL_SSL,SSL:SSL"
	fi
	cat >"$PROPS" <<EOF
# Written by test/env/kafka.sh on every start; edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$DATA
num.partitions=3
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Single node: a broker killed with -9 is fenced after this timeout; keep restarts quick.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=3000
num.network.threads=2
num.io.threads=4
EOF
	if secure_on; then secure_config >>"$PROPS"; fi
	cat >"$LOG4J" <<EOF
# Written by test/env/kafka.sh: everything goes to $STATE/logs/server.log, nothing to the terminal.
status = warn
name = walrelay-test-kafka
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = $STATE/logs/server.log
appender.file.filePattern = $STATE/logs/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.statechange.name = state.change.logger
logger.statechange.level = warn
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = warn
EOF
}

format_storage() {
	if [ -f "$DATA/meta.properties" ]; then
		if secure_on && [ ! -f "$SECURE/formatted" ]; then
			die "$DATA was formatted without WALRELAY_TEST_KAFKA_SECURE=1 (no SCRAM user): stop, remove $STATE and start again"
		fi
		return
	fi
	local scram=()
	if secure_on; then
		scram=(--add-scram "SCRAM-SHA-512=[name=$(cat "$SECURE/scram-user"),password=$(cat "$SECURE/scram-password")]")
	fi
	local id
	if [ -s "$STATE/cluster.id" ]; then
		id="$(cat "$STATE/cluster.id")"
	else
		id="$(jvm kafka.tools.StorageTool random-uuid 2>>"$STATE/format.log" | tail -n 1)"
		[ -n "$id" ] || die "StorageTool random-uuid failed (see $STATE/format.log)"
		printf '%s\n' "$id" >"$STATE/cluster.id"
	fi
	log "formatting $DATA (cluster id $id)"
	jvm kafka.tools.StorageTool format -t "$id" -c "$PROPS" "${scram[@]}" >>"$STATE/format.log" 2>&1 ||
		{ cat "$STATE/format.log" >&2; die "StorageTool format failed"; }
	if secure_on; then : >"$SECURE/formatted"; fi
}

# MARK: the broker's command line holds it (a recycled pid is not our broker).
MARK="kafka.Kafka $PROPS"

answers() {
	if command -v kcat >/dev/null; then
		# Up means: the broker is listed and no partition is still without a leader (after a
		# kill -9 the controller fences the old incarnation and re-elects first).
		local md
		md="$(kcat -b "$KAFKA_ADDR" -L -m 2 2>/dev/null)" || return 1
		grep -q "broker 1 at" <<<"$md" && ! grep -q "leader -1" <<<"$md"
	else
		port_open "$KAFKA_PORT" && grep -q "Kafka Server started" "$STATE/logs/server.log" 2>/dev/null
	fi
}

wait_ready() {
	await_service "broker on $KAFKA_ADDR" "$1" "$START_TIMEOUT" "$STATE/kafka.out $STATE/logs/server.log" \
		"$KAFKA_PORT $KAFKA_CONTROLLER_PORT" answers
}

cmd_start() {
	local pid t0=$SECONDS
	if pid="$(service_pid "$PIDFILE" "$MARK")"; then
		wait_ready "$pid"
		log "already running on $KAFKA_ADDR (pid $pid)"
		return
	fi
	fetch
	if [ -z "$KAFKA_PORT_GIVEN" ]; then
		local free
		free="$(pick_port "$KAFKA_PORT" 10)" || die "no 10 free ports for Kafka"
		if [ "$free" != "$KAFKA_PORT" ]; then
			log "a port of $KAFKA_PORT..$((KAFKA_PORT + 9)) is taken; using $free"
			set_ports "$free"
		fi
	fi
	wait_ports_free 10 "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" $(secure_on && echo $((KAFKA_PORT + 2)) $((KAFKA_PORT + 3)))
	ensure_state_dir "$WALRELAY_TEST_DIR"
	mkdir -p "$STATE"
	printf '%s\n' "$KAFKA_PORT" >"$KAFKA_PORT_FILE"
	if secure_on; then secure_setup; fi
	write_config
	format_storage
	register kafka
	log "starting Kafka $KAFKA_VERSION on $KAFKA_ADDR (controller :$KAFKA_CONTROLLER_PORT)"
	jvm_cmd
	spawn_service "$STATE" "$STATE/kafka.out" "$PIDFILE" "${JVM[@]}" kafka.Kafka "$PROPS"
	pid="$SERVICE_PID"
	wait_ready "$pid"
	log "ready on $KAFKA_ADDR (pid $pid) in $((SECONDS - t0)) s"
}

cmd_stop() { stop_service "$PIDFILE" "$MARK" 60; }
cmd_kill() { kill_service "$PIDFILE" "$MARK"; }
cmd_status() { service_status kafka "$KAFKA_ADDR" "$STATE" "$PIDFILE" "$MARK"; }

cmd_env() {
	emit_export WALRELAY_TEST_KAFKA "$KAFKA_ADDR"
	emit_export WALRELAY_TEST_KAFKA_PORT "$KAFKA_PORT"
	emit_export WALRELAY_TEST_KAFKA_LOG "$STATE/logs/server.log"
	if [ -f "$SECURE/formatted" ]; then
		emit_export WALRELAY_TEST_KAFKA_SASL_SSL "$KAFKA_SASL_SSL_ADDR"
		emit_export WALRELAY_TEST_KAFKA_SSL "$KAFKA_SSL_ADDR"
		emit_export WALRELAY_TEST_KAFKA_SECURE_DIR "$SECURE"
	fi
}

case "${1:-}" in
fetch) fetch ;;
start) cmd_start ;;
stop) cmd_stop ;;
kill) cmd_kill ;;
restart)
	cmd_stop
	cmd_start
	;;
status) cmd_status ;;
env) cmd_env ;;
*)
	echo "usage: $0 fetch|start|stop|kill|restart|status|env" >&2
	exit 2
	;;
esac
