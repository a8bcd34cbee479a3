#!/usr/bin/env bash
# Self-check of the schema registry test kit, end to end and without walrelay: a throwaway Kafka
# (test/env/kafka.sh) and Apicurio Registry (test/env/registry.sh); srcheck (franz-go's sr
# client against the registry's ccompat API, then Avro, Protobuf and JSON Schema records in
# Confluent framing produced to Kafka); consumer.sh (Apicurio's deserializers) reads them back;
# srcheck compare matches what was read to what was produced. Stops what it started.
#
#   bash test/registry/check.sh
#
# Environment:
#   WALRELAY_TEST_DIR                    state dir (default /tmp/walrelay-registry-check, wiped)
#   WALRELAY_TEST_SCHEMA_REGISTRY_AUTH   basic: the registry requires HTTP basic auth, and the
#                                        producer and consumer use it
#   WALRELAY_TEST_KEEP=1                 leave Kafka and the registry running afterwards
set -euo pipefail
# shellcheck source=../env/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../env/common.sh"
WALRELAY_LOG_TAG=registry-check
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

WALRELAY_TEST_DIR="$(abs_path "${WALRELAY_TEST_DIR:-/tmp/walrelay-registry-check}")"
export WALRELAY_TEST_DIR
take_lock "$WALRELAY_TEST_DIR"
"$WALRELAY_ENV_DIR/registry.sh" stop 8>&- || true
stop_services "$WALRELAY_TEST_DIR"
safe_wipe "$WALRELAY_TEST_DIR"
ensure_state_dir "$WALRELAY_TEST_DIR"

on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "${WALRELAY_TEST_KEEP:-0}" = 1 ]; then
		log "WALRELAY_TEST_KEEP=1: Kafka and the registry left running in $WALRELAY_TEST_DIR"
	else
		"$WALRELAY_ENV_DIR/registry.sh" stop 8>&- || true
		stop_services "$WALRELAY_TEST_DIR"
	fi
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t0=$SECONDS
if [ -z "${WALRELAY_TEST_KAFKA_PORT:-}" ]; then
	WALRELAY_TEST_KAFKA_PORT="$(free_port_block 10)" || die "no free ports for Kafka"
	export WALRELAY_TEST_KAFKA_PORT
fi
"$WALRELAY_ENV_DIR/kafka.sh" start 8>&-
"$WALRELAY_ENV_DIR/registry.sh" start 8>&-
eval "$("$WALRELAY_ENV_DIR/kafka.sh" env)"
eval "$("$WALRELAY_ENV_DIR/registry.sh" env)"
"$WALRELAY_ENV_DIR/registry.sh" env

work="$WALRELAY_TEST_DIR/registry-check"
mkdir -p "$work"
(cd "$HERE/srcheck" && go build -o "$work/srcheck" .)
"$work/srcheck" -prefix check >"$work/expected.jsonl"
n="$(wc -l <"$work/expected.jsonl")"
"$HERE/consumer.sh" fetch 8>&-
topics=(--topic check-avro=avro --topic check-proto=protobuf --topic check-json=json)
if ! "$HERE/consumer.sh" "${topics[@]}" --count "$n" --timeout-ms 30000 >"$work/got.jsonl" 8>&-; then
	cat "$work/got.jsonl" >&2
	die "the consumer did not decode every record (lines above)"
fi
cat "$work/got.jsonl"
"$work/srcheck" compare "$work/expected.jsonl" "$work/got.jsonl"
log "schema registry kit checked in $((SECONDS - t0)) s"
