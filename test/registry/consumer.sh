#!/usr/bin/env bash
# An independent consumer of Confluent-framed records: test/registry/ConfluentConsumer.java with
# Apicurio Registry's Kafka deserializers (jars from Maven Central via test/registry/pom.xml,
# cached, compiled once per source version). One JSON line per record on stdout.
#
#   consumer.sh fetch                 resolve the jars and compile (no-op when cached)
#   consumer.sh --topic T=avro [--topic T2=protobuf --topic T3=json ...] [--count N]
#               [--timeout-ms MS] [--serde KEY=VALUE ...]
#
# Defaults taken from the environment of test/env/kafka.sh and test/env/registry.sh (`env`):
#   --bootstrap      $WALRELAY_TEST_KAFKA
#   --registry       $WALRELAY_TEST_SCHEMA_REGISTRY with /apis/ccompat/v7 replaced by
#                    /apis/registry/v3 (the serdes speak Apicurio's own API; the ids are the same)
#   --user, --password-file  $WALRELAY_TEST_SCHEMA_REGISTRY_USER, ..._PASSWORD_FILE when set
# Explicit arguments come after these, so they win.
#
# Environment:
#   WALRELAY_APICURIO_SERDES_VERSION  io.apicurio serdes version (default 3.1.7: the newest Maven
#                                     Central serves for Avro, Protobuf and JSON Schema alike)
#   WALRELAY_KAFKA_CLIENTS_VERSION    org.apache.kafka:kafka-clients version (default 4.3.1)
#   WALRELAY_CACHE                    cache (default $HOME/.cache/walrelay)
#   WALRELAY_REGISTRY_CONSUMER_LOG    slf4j-simple level of the libraries' logs on stderr
#                                     (default off: failures are reported in the JSON lines)
set -euo pipefail
# shellcheck source=../env/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../env/common.sh"
WALRELAY_LOG_TAG=registry-consumer

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SERDES_VERSION="${WALRELAY_APICURIO_SERDES_VERSION:-3.1.7}"
CLIENTS_VERSION="${WALRELAY_KAFKA_CLIENTS_VERSION:-4.3.1}"
CACHE_DIR="$(abs_path "${WALRELAY_CACHE:-$HOME/.cache/walrelay}")/registry-consumer-$SERDES_VERSION-kafka-$CLIENTS_VERSION"
LIBS="$CACHE_DIR/libs"
SRC="$HERE/ConfluentConsumer.java"

# fetch: the jars, then the class compiled from the current source (its own directory per
# source hash, made under a temporary name and renamed when complete).
fetch() {
	maven_jars "$LIBS" "$HERE/pom.xml" "Apicurio serdes $SERDES_VERSION + kafka-clients $CLIENTS_VERSION" \
		"apicurio-registry-avro-serde-kafka-$SERDES_VERSION.jar apicurio-registry-protobuf-serde-kafka-$SERDES_VERSION.jar apicurio-registry-jsonschema-serde-kafka-$SERDES_VERSION.jar kafka-clients-$CLIENTS_VERSION.jar" \
		-Dserdes.version="$SERDES_VERSION" -Dkafka.version="$CLIENTS_VERSION"
	CLASSES="$CACHE_DIR/classes-$(sha256sum "$SRC" | cut -c1-16)"
	[ -f "$CLASSES/ConfluentConsumer.class" ] && return 0
	local javac tmp="$CLASSES.tmp.$$"
	javac="$(dirname "$(readlink -f "$(java_bin)")")/javac"
	[ -x "$javac" ] || javac="$(command -v javac || true)"
	[ -n "$javac" ] || die "javac not found (a JDK 17 or newer is needed to compile $SRC)"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	"$javac" -nowarn -d "$tmp" -cp "$LIBS/*" "$SRC" || { rm -rf "$tmp"; die "compiling $SRC failed"; }
	rm -rf "$CLASSES"
	mv "$tmp" "$CLASSES"
}

if [ "${1:-}" = fetch ]; then
	fetch
	exit 0
fi
fetch
defaults=()
[ -n "${WALRELAY_TEST_KAFKA:-}" ] && defaults+=(--bootstrap "$WALRELAY_TEST_KAFKA")
if [ -n "${WALRELAY_TEST_SCHEMA_REGISTRY:-}" ]; then
	defaults+=(--registry "${WALRELAY_TEST_SCHEMA_REGISTRY%/apis/ccompat/v7}/apis/registry/v3")
fi
if [ -n "${WALRELAY_TEST_SCHEMA_REGISTRY_USER:-}" ]; then
	defaults+=(--user "$WALRELAY_TEST_SCHEMA_REGISTRY_USER" --password-file "$WALRELAY_TEST_SCHEMA_REGISTRY_PASSWORD_FILE")
fi
exec "$(java_bin)" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData \
	-Dorg.slf4j.simpleLogger.defaultLogLevel="${WALRELAY_REGISTRY_CONSUMER_LOG:-off}" \
	-cp "$LIBS/*:$CLASSES" ConfluentConsumer "${defaults[@]}" "$@"
