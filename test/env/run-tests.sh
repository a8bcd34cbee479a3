#!/usr/bin/env bash
# `make test`: fresh Postgres + Kafka, go vet, go test -race, a short decoder fuzz, and
# everything stopped again whatever happens. Exits non-zero when any step failed.
#
# The tests see (exported):
#   WALRELAY_TEST_PG_DSN, WALRELAY_TEST_PG_PORT, WALRELAY_TEST_PGDATA, WALRELAY_TEST_PGBIN,
#   WALRELAY_TEST_PG_LOG, WALRELAY_TEST_KAFKA, WALRELAY_TEST_KAFKA_LOG, WALRELAY_TEST_DIR,
#   WALRELAY_TEST_KAFKA_SASL_SSL, WALRELAY_TEST_KAFKA_SSL, WALRELAY_TEST_KAFKA_SECURE_DIR,
#   WALRELAY_TEST_SCHEMA_REGISTRY (test/env/registry.sh env), WALRELAY_TEST_SCHEMA_REGISTRY_REQUIRED,
#   WALRELAY_TEST_REGISTRY_CONSUMER,
#   WALRELAY_TEST_ENV_DIR (this directory: pg.sh restart-immediate, kafka.sh kill|restart, ...),
#   WALRELAY_TEST_REGISTRY (services started through pg.sh/kafka.sh are stopped at the end,
#   also a second cluster a test starts with its own WALRELAY_TEST_DIR and port).
# pg_ctl refuses to run as root: tests restart Postgres through "$WALRELAY_TEST_ENV_DIR/pg.sh".
#
# Knobs: WALRELAY_TEST_PG_MATRIX (the other majors whose core tests run after the suite,
# default "14 15 16 17 18" less the main one, none when PG or GO_TEST_FLAGS is given; ""
# skips them), WALRELAY_TEST_PG_VERSION
# (`make test PG=17`: the Postgres major, 14 to 18, default
# Debian's 15; pg.sh installs the others through pgversions.sh and `pg.sh env` hands the
# tests their WALRELAY_TEST_PGBIN), WALRELAY_TEST_DIR (default
# /tmp/walrelay-test, wiped at start), GO_TEST_FLAGS (extra
# flags for go test, e.g. "-run TestX -v"), WALRELAY_FUZZTIME (default 30s; 0 skips the fuzz),
# WALRELAY_TEST_KEEP=1 (leave the services running afterwards, for debugging),
# WALRELAY_TEST_PG_PORT / WALRELAY_TEST_KAFKA_PORT (default: free ports outside the kernel's
# ephemeral range, picked at start; Kafka uses the port and the next 9).
#
# Go tests run as `go test -json` through test/env/gotestcount, which prints what plain go test
# prints (ok/FAIL lines, the output of failing tests), a progress line every minute while tests
# run (passed so far, the tests running and for how long), and counts tests; the run ends with
#   go tests: N passed, N failed, N skipped
# summed over every go test step (a fuzz step counts as its package), then one line per
# skipped test with its reason.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG="test"
cd "$WALRELAY_ROOT"

WALRELAY_TEST_DIR="$(abs_path "$WALRELAY_TEST_DIR")"
export WALRELAY_TEST_DIR
export WALRELAY_TEST_ENV_DIR="$WALRELAY_ENV_DIR"
export WALRELAY_TEST_REGISTRY="$WALRELAY_TEST_DIR/services"
FUZZTIME="${WALRELAY_FUZZTIME:-30s}"

COUNTS="$WALRELAY_TEST_DIR/go-test-counts"
SKIPPED="$WALRELAY_TEST_DIR/go-tests-skipped"
GOTESTCOUNT="$WALRELAY_TEST_DIR/bin/gotestcount"

on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "${WALRELAY_TEST_KEEP:-0}" = 1 ]; then
		log "WALRELAY_TEST_KEEP=1: services left running in $WALRELAY_TEST_DIR"
	else
		stop_services "$WALRELAY_TEST_DIR"
	fi
	if [ -f "$COUNTS" ]; then
		awk '{p += $1; f += $2; s += $3} END {printf "go tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$COUNTS"
	fi
	if [ -s "$SKIPPED" ]; then
		sed 's/^/  skipped: /' "$SKIPPED"
	fi
	exit "$rc"
}

# Fresh state every run: no slots or topics leak from an earlier run.
fresh_state_dir "$WALRELAY_TEST_DIR"
# Temporary files of go and of the tests (t.TempDir, the e2e binary) stay in the state dir too.
export TMPDIR="$WALRELAY_TEST_DIR/tmp"
mkdir -p "$TMPDIR"

# Ports: the ones given, else free ones, so a port some other process (or an outgoing
# connection) holds cannot break the run.
if [ -z "${WALRELAY_TEST_PG_PORT:-}" ]; then
	WALRELAY_TEST_PG_PORT="$(free_port_block 1)" || die "no free port for Postgres"
fi
if [ -z "${WALRELAY_TEST_KAFKA_PORT:-}" ]; then
	WALRELAY_TEST_KAFKA_PORT="$(free_port_block 10)" || die "no free ports for Kafka"
fi
export WALRELAY_TEST_PG_PORT WALRELAY_TEST_KAFKA_PORT

go build -o "$GOTESTCOUNT" ./test/env/gotestcount
: >"$COUNTS"

trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$WALRELAY_ENV_DIR/pg.sh" start 8>&-
# The broker also gets SASL_SSL and mTLS listeners for test/security_test.go.
WALRELAY_TEST_KAFKA_SECURE=1 "$WALRELAY_ENV_DIR/kafka.sh" start 8>&-
eval "$("$WALRELAY_ENV_DIR/pg.sh" env)"
eval "$("$WALRELAY_ENV_DIR/kafka.sh" env)"
env | grep '^WALRELAY_TEST_' | sort >&2
log "$("$WALRELAY_TEST_PGBIN/postgres" --version)"

failed=()
step() {
	local name="$1" t0=$SECONDS
	shift
	log "== $name: $*"
	if "$@" 8>&-; then
		log "== $name ok ($((SECONDS - t0)) s)"
	else
		log "== $name FAILED ($((SECONDS - t0)) s)"
		failed+=("$name")
	fi
}

# gotest [-packages] ARGS: go test -json ARGS, shown and counted by gotestcount; fails when
# go test or any test failed.
gotest() {
	local mode=()
	if [ "$1" = -packages ]; then
		mode=(-packages)
		shift
	fi
	case " $* " in *" -v "*) mode+=(-v) ;; esac
	go test -json "$@" | "$GOTESTCOUNT" "${mode[@]}" -counts "$COUNTS" -skipped "$SKIPPED" -progress 60s
}

# The schema registry (Apicurio, test/env/registry.sh) for the Schema Registry tests, which
# fail rather than skip without it (WALRELAY_TEST_SCHEMA_REGISTRY_REQUIRED) and read back with
# test/registry/consumer.sh (WALRELAY_TEST_REGISTRY_CONSUMER); stop_services stops it with the
# rest.
export WALRELAY_TEST_SCHEMA_REGISTRY_REQUIRED=1 WALRELAY_TEST_REGISTRY_CONSUMER=1
step schema-registry "$WALRELAY_ENV_DIR/registry.sh" start
if "$WALRELAY_ENV_DIR/registry.sh" status >/dev/null 8>&-; then
	eval "$("$WALRELAY_ENV_DIR/registry.sh" env 8>&-)"
fi

read -r -a extra <<<"${GO_TEST_FLAGS:-}"
step vet go vet ./...
step test gotest -race -count=1 -timeout 30m "${extra[@]}" ./...
step alerts-check promtool check rules deploy/alerts.yaml
step alerts-test promtool test rules deploy/alerts_test.yaml

if [ "$FUZZTIME" = 0 ]; then
	log "== fuzz skipped (WALRELAY_FUZZTIME=0)"
elif grep -qs '^func FuzzDecode(' decoder/*_test.go; then
	step fuzz gotest -packages ./decoder -run '^$' -fuzz '^FuzzDecode$' -fuzztime "$FUZZTIME"
	step fuzz-framing gotest -packages ./replication -run '^$' -fuzz '^FuzzStreamFraming$' -fuzztime 15s
else
	log "== fuzz skipped: no FuzzDecode in decoder/*_test.go yet"
fi

# The other supported Postgres majors: the end-to-end core, the kill -9 chaos test, the
# failover and standby tests and the tests of what differs between majors, each major on a
# cluster of its own (installed on demand by pgversions.sh, cached) beside the same Kafka.
# The whole suite ran above on the main major. WALRELAY_TEST_PG_MATRIX lists the majors
# (default: every supported one but the main one, unless a major or GO_TEST_FLAGS was
# chosen: then none).
PG_CORE='^(TestEndToEnd|TestFaultKill9|TestPostgresFailover|TestDecodingOnStandby|TestSlotFailover|TestFaultBadInputs|TestPublicationWithoutInsertsRefused|TestNewUserErrors|TestTablelessOptIn|TestReadSlotAndEmitMessage)$'
pg_main="$("$WALRELAY_TEST_PGBIN/postgres" --version | awk '{print $3}' | cut -d. -f1)"
pg_matrix=()
matrix_default="14 15 16 17 18"
if [ -n "${WALRELAY_TEST_PG_VERSION:-}" ] || [ -n "${GO_TEST_FLAGS:-}" ]; then
	matrix_default=""
fi
for v in ${WALRELAY_TEST_PG_MATRIX-$matrix_default}; do
	[ "$v" = "$pg_main" ] || pg_matrix+=("$v")
done
pg_major_core() (
	local v="$1" dir="$WALRELAY_TEST_DIR/pg$1"
	local port
	port="$(free_port_block 1)" || die "no free port for Postgres $v"
	WALRELAY_TEST_DIR="$dir" WALRELAY_TEST_PG_PORT="$port" WALRELAY_TEST_PG_VERSION="$v" "$WALRELAY_ENV_DIR/pg.sh" start 8>&- || return 1
	# The port and the version go to env too: the WALRELAY_TEST_PG_PORT and WALRELAY_TEST_PGBIN
	# exported for the main cluster would otherwise point the tests at the main cluster and
	# name its binaries for every cluster the tests start themselves.
	eval "$(WALRELAY_TEST_DIR="$dir" WALRELAY_TEST_PG_PORT="$port" WALRELAY_TEST_PG_VERSION="$v" "$WALRELAY_ENV_DIR/pg.sh" env)"
	export WALRELAY_TEST_PG_DSN WALRELAY_TEST_PG_PORT WALRELAY_TEST_PGDATA WALRELAY_TEST_PGBIN WALRELAY_TEST_PG_LOG
	local have
	have="$("$WALRELAY_TEST_PGBIN/postgres" --version)"
	log "$have"
	case "$have" in
	*" $v."*) ;;
	*) log "the Postgres $v step would run $have"; return 1 ;;
	esac
	case "$WALRELAY_TEST_PG_DSN" in
	*":$port/"*) ;;
	*) log "the Postgres $v step would test $WALRELAY_TEST_PG_DSN, not its cluster on port $port"; return 1 ;;
	esac
	local rc=0
	gotest -race -count=1 -timeout 20m -run "$PG_CORE" ./test/ ./replication/ ./cmd/walrelay/ || rc=1
	WALRELAY_TEST_DIR="$dir" "$WALRELAY_ENV_DIR/pg.sh" stop 8>&- || rc=1
	return "$rc"
)
for v in "${pg_matrix[@]}"; do
	step "postgres-$v" pg_major_core "$v"
done

# Packaging: the container image (buildah, offline) and the deploy/ manifests (a nested Go
# module, so the Kubernetes and compose libraries stay out of walrelay's own go.mod).
step image bash "$WALRELAY_ENV_DIR/image-test.sh"
deploy_tests() (
	cd deploy/validate && go vet ./... && gotest -count=1 ./...
)
step deploy deploy_tests

if [ "${#failed[@]}" -gt 0 ]; then
	log "FAILED steps: ${failed[*]} (logs: $WALRELAY_TEST_DIR)"
	exit 1
fi
log "all steps passed"
