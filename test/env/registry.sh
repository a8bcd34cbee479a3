#!/usr/bin/env bash
# Apicurio Registry 3 for walrelay's Schema Registry tests: the Confluent-compatible API
# (/apis/ccompat/v7) over in-memory H2 storage, on loopback. From Maven Central: the app's
# published Quarkus runner layout (io.apicurio:apicurio-registry-app:<v>:tar.gz:all), unpacked
# once into the cache; no build step. It needs Java 21 or newer (the app is built for 21).
#
#   registry.sh fetch    resolve and unpack the runner into the cache (no-op when cached)
#   registry.sh start    start (schemas are lost on stop: in-memory); idempotent; waits until
#                        it answers
#   registry.sh stop     SIGTERM and wait (SIGKILL after 30 s); no-op when not running
#   registry.sh restart  stop if running, then start (empty again)
#   registry.sh status   exit 0 when running, 3 when not
#   registry.sh env      print `export ...` lines (eval "$(test/env/registry.sh env)"):
#                        WALRELAY_TEST_SCHEMA_REGISTRY (the ccompat base URL), and with basic
#                        auth ..._USER and ..._PASSWORD_FILE (the password is never printed)
#
# Environment:
#   WALRELAY_TEST_DIR                      state root (default /tmp/walrelay-test); the registry
#                                          lives in ./schema-registry
#   WALRELAY_TEST_SCHEMA_REGISTRY_PORT     HTTP port on 127.0.0.1 (default: the port of the last
#                                          start in this state dir, else 58081, or a free block
#                                          when 58081..58082 is not free); port+1 is Quarkus's
#                                          management interface (/health/ready, /metrics)
#   WALRELAY_TEST_SCHEMA_REGISTRY_AUTH     "basic": HTTP basic auth on every API call, for one
#                                          user with a random password (./schema-registry/auth,
#                                          remembered for restarts); default none
#   WALRELAY_TEST_SCHEMA_REGISTRY_COMPAT   global compatibility at start (default BACKWARD, as in
#                                          Confluent's registry; Apicurio's own default is NONE)
#   WALRELAY_APICURIO_VERSION              io.apicurio:apicurio-registry-app version (default 3.3.3)
#   WALRELAY_REGISTRY_JAVA_HOME            a JDK/JRE >= 21 (default: $JAVA_HOME, java on PATH or
#                                          the newest under /usr/lib/jvm, whichever is >= 21)
#   WALRELAY_CACHE                         cache (default $HOME/.cache/walrelay), outside the tree
#   WALRELAY_TEST_SCHEMA_REGISTRY_HEAP     JVM heap flags (default "-Xms64m -Xmx384m")
#   WALRELAY_TEST_SCHEMA_REGISTRY_START_TIMEOUT  seconds to wait for it (default 120)
#
# Where Apicurio's ccompat API differs from Confluent's (seen with 3.3.3): schema ids are
# Apicurio content ids (the same text under two subjects gets one id; a refused registration
# may still use up an id); POST /compatibility/... answers 422 "Syntax violation" for a schema
# with references (registration with references does check compatibility: 409); a wrong or
# missing password gets 401 with an empty body.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=schema-registry

APICURIO_VERSION="${WALRELAY_APICURIO_VERSION:-3.3.3}"
CACHE_ROOT="$(abs_path "${WALRELAY_CACHE:-$HOME/.cache/walrelay}")"
APP="$CACHE_ROOT/apicurio-registry-$APICURIO_VERSION"
STATE="$(abs_path "$WALRELAY_TEST_DIR")/schema-registry"
PIDFILE="$STATE/registry.pid"
PORT_FILE="$STATE/port"
AUTH_DIR="$STATE/auth"
START_TIMEOUT="${WALRELAY_TEST_SCHEMA_REGISTRY_START_TIMEOUT:-120}"
COMPAT="${WALRELAY_TEST_SCHEMA_REGISTRY_COMPAT:-BACKWARD}"
PORT_GIVEN="${WALRELAY_TEST_SCHEMA_REGISTRY_PORT:-$(cat "$PORT_FILE" 2>/dev/null || true)}"
set_ports() {
	PORT="$1"
	MGMT_PORT="$((PORT + 1))"
	BASE="http://127.0.0.1:$PORT"
	URL="$BASE/apis/ccompat/v7"
}
set_ports "${PORT_GIVEN:-58081}"

# fetch: the runner layout (quarkus-run.jar, lib/, app/, quarkus/) in $APP, unpacked from the
# tarball Apicurio publishes beside the app jar. One fetcher at a time (flock on the cache);
# the layout appears under its final name only when complete.
fetch() {
	registry_java >/dev/null
	[ -f "$APP/.complete" ] && return 0
	command -v mvn >/dev/null || die "mvn not found (run test/env/deps.sh)"
	mkdir -p "$CACHE_ROOT"
	exec 9>"$CACHE_ROOT/.lock"
	flock 9
	if [ ! -f "$APP/.complete" ]; then
		local tmp="$APP.tmp.$$" t0=$SECONDS
		rm -rf "$tmp"
		mkdir -p "$tmp/dl"
		log "resolving io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all from Maven into $APP"
		if ! mvn -B -q -Dstyle.color=never dependency:copy \
			-Dartifact="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" \
			-DoutputDirectory="$tmp/dl" >"$CACHE_ROOT/apicurio-mvn.log" 2>&1; then
			sed 's/\x1b\[[0-9;]*m//g' "$CACHE_ROOT/apicurio-mvn.log" >&2
			rm -rf "$tmp"
			die "maven could not resolve the Apicurio Registry $APICURIO_VERSION runner (log: $CACHE_ROOT/apicurio-mvn.log)"
		fi
		tar -xzf "$tmp/dl/apicurio-registry-app-$APICURIO_VERSION-all.tar.gz" -C "$tmp" ||
			die "unpacking the Apicurio Registry runner failed"
		rm -rf "$tmp/dl"
		[ -f "$tmp/quarkus-run.jar" ] || die "quarkus-run.jar missing from the Apicurio Registry $APICURIO_VERSION tarball"
		: >"$tmp/.complete"
		rm -rf "$APP"
		mv "$tmp" "$APP"
		log "unpacked the runner ($(du -sm "$APP" | cut -f1) MB) in $((SECONDS - t0)) s"
	fi
	exec 9>&-
}

# java_major JAVA: the feature version of JAVA (0 when it does not run).
java_major() {
	"$1" -XshowSettings:properties -version 2>&1 |
		awk -F'= ' '/java.specification.version/ {split($2, v, "."); print (v[1] == 1 ? v[2] : v[1]); found=1} END {if (!found) print 0}'
}

# registry_java: a java of version 21 or newer.
registry_java() {
	local c
	for c in ${WALRELAY_REGISTRY_JAVA_HOME:+"$WALRELAY_REGISTRY_JAVA_HOME/bin/java"} \
		${JAVA_HOME:+"$JAVA_HOME/bin/java"} "$(command -v java || true)" \
		$(ls -d /usr/lib/jvm/*/bin/java 2>/dev/null | sort -rV); do
		[ -x "$c" ] || continue
		if [ "$(java_major "$c")" -ge 21 ]; then
			printf '%s\n' "$c"
			return 0
		fi
	done
	die "no Java 21 or newer found (Apicurio Registry $APICURIO_VERSION is built for 21): set WALRELAY_REGISTRY_JAVA_HOME"
}

auth_on() { [ "${WALRELAY_TEST_SCHEMA_REGISTRY_AUTH:-}" = basic ] || [ -f "$AUTH_DIR/enabled" ]; }

auth_setup() {
	[ -f "$AUTH_DIR/enabled" ] && return
	command -v openssl >/dev/null || die "openssl not found"
	mkdir -p "$AUTH_DIR"
	chmod 700 "$AUTH_DIR"
	printf 'walrelay\n' >"$AUTH_DIR/user"
	(umask 077 && openssl rand -hex 16 >"$AUTH_DIR/password")
	: >"$AUTH_DIR/enabled"
}

# write_config: Quarkus reads config/application.properties below its working directory (the
# state dir), so no setting (and no password) shows on the command line.
write_config() {
	mkdir -p "$STATE/config" "$STATE/tmp"
	local f="$STATE/config/application.properties"
	(
		umask 077
		cat >"$f" <<EOF
# Written by test/env/registry.sh on every start; edits are lost.
quarkus.http.host=127.0.0.1
quarkus.http.port=$PORT
quarkus.management.host=127.0.0.1
quarkus.management.port=$MGMT_PORT
# In-memory H2 (Apicurio's default storage), with a smaller pool than its default of 20.
apicurio.datasource.jdbc.initial-size=2
apicurio.datasource.jdbc.min-size=2
apicurio.datasource.jdbc.max-size=20
apicurio.storage.snapshot.location=$STATE/tmp
apicurio.import.work-dir=$STATE/tmp
# Confluent's default global compatibility (GET /config answers compatibilityLevel).
apicurio.rules.global.compatibility=$COMPAT
# Deleting subjects and versions through ccompat, as tests clean up after themselves.
apicurio.rest.deletion.artifact.enabled=true
apicurio.rest.deletion.artifact-version.enabled=true
quarkus.log.console.format=%d{yyyy-MM-dd HH:mm:ss,SSS} %p [%c{2.}] (%t) %m%n
EOF
		if auth_on; then
			cat >>"$f" <<EOF
# HTTP basic auth for one embedded user (Apicurio warns that quarkus.http.auth.basic is
# "build time fixed", yet its own authentication chain reads it at run time and enforces it).
quarkus.http.auth.basic=true
apicurio.authn.mechanism.priority=basic
quarkus.security.users.embedded.plain-text=true
quarkus.security.users.embedded.users.$(cat "$AUTH_DIR/user")=$(cat "$AUTH_DIR/password")
quarkus.security.users.embedded.roles.$(cat "$AUTH_DIR/user")=sr-admin
EOF
		fi
	)
}

# MARK: the registry's command line holds it (a recycled pid is not our registry, nor is one
# started in another state dir).
MARK="-Dwalrelay.state=$STATE "

# answers: the storage is ready (management health) and the ccompat API serves (any HTTP
# answer: 401 with basic auth on).
answers() {
	curl -fsS -m 5 "http://127.0.0.1:$MGMT_PORT/health/ready" >/dev/null 2>&1 || return 1
	local code
	code="$(curl -sS -m 5 -o /dev/null -w '%{http_code}' "$URL/subjects" 2>/dev/null)" || return 1
	[ "$code" = 200 ] || [ "$code" = 401 ]
}

# ready PID: the registry answers and it is process PID that listens: another suite's registry
# that took the port meanwhile answers too, while this one dies on the bind. Lines of
# registry.out past MARK_LINE are this start's.
ready() {
	answers && pid_alive "$1" && tail -n "+$((MARK_LINE + 1))" "$STATE/registry.out" | grep -q "Listening on: $BASE\."
}

cmd_start() {
	local pid t0=$SECONDS
	if pid="$(service_pid "$PIDFILE" "$MARK")"; then
		log "already running on $URL (pid $pid)"
		return
	fi
	command -v curl >/dev/null || die "curl not found"
	fetch
	local java
	java="$(registry_java)"
	if [ -z "$PORT_GIVEN" ]; then
		local free
		free="$(pick_port "$PORT" 2)" || die "no 2 free ports for the schema registry"
		if [ "$free" != "$PORT" ]; then
			log "a port of $PORT..$((PORT + 1)) is taken; using $free"
			set_ports "$free"
		fi
	fi
	wait_ports_free 10 "$PORT" "$MGMT_PORT"
	ensure_state_dir "$WALRELAY_TEST_DIR"
	mkdir -p "$STATE"
	printf '%s\n' "$PORT" >"$PORT_FILE"
	if auth_on; then auth_setup; fi
	write_config
	register schema-registry
	log "starting Apicurio Registry $APICURIO_VERSION on $URL (management :$MGMT_PORT, $java)"
	MARK_LINE=0
	if [ -f "$STATE/registry.out" ]; then MARK_LINE="$(wc -l <"$STATE/registry.out")"; fi
	local heap
	read -r -a heap <<<"${WALRELAY_TEST_SCHEMA_REGISTRY_HEAP:--Xms64m -Xmx384m}"
	# Quarkus reads config/ below its working directory, the state dir. -Dwalrelay.state is MARK.
	spawn_service "$STATE" "$STATE/registry.out" "$PIDFILE" \
		"$java" "${heap[@]}" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
		-XX:+ExitOnOutOfMemoryError -XX:-UsePerfData -Djava.io.tmpdir="$STATE/tmp" \
		-Djava.awt.headless=true -Dwalrelay.state="$STATE" -jar "$APP/quarkus-run.jar"
	pid="$SERVICE_PID"
	await_service "registry on $URL" "$pid" "$START_TIMEOUT" "$STATE/registry.out" "$PORT $MGMT_PORT" ready "$pid"
	log "ready on $URL (pid $pid) in $((SECONDS - t0)) s"
}

cmd_stop() { stop_service "$PIDFILE" "$MARK" 30; }
cmd_status() { service_status "schema registry" "$URL" "$STATE" "$PIDFILE" "$MARK"; }

cmd_env() {
	emit_export WALRELAY_TEST_SCHEMA_REGISTRY "$URL"
	emit_export WALRELAY_TEST_SCHEMA_REGISTRY_LOG "$STATE/registry.out"
	if [ -f "$AUTH_DIR/enabled" ]; then
		emit_export WALRELAY_TEST_SCHEMA_REGISTRY_USER "$(cat "$AUTH_DIR/user")"
		emit_export WALRELAY_TEST_SCHEMA_REGISTRY_PASSWORD_FILE "$AUTH_DIR/password"
	fi
}

case "${1:-}" in
fetch) fetch ;;
start) cmd_start ;;
stop) cmd_stop ;;
restart)
	cmd_stop
	cmd_start
	;;
status) cmd_status ;;
env) cmd_env ;;
*)
	echo "usage: $0 fetch|start|stop|restart|status|env" >&2
	exit 2
	;;
esac
