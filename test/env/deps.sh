#!/usr/bin/env bash
# Installs what the end-to-end tests need and is missing, on Debian (as root), and resolves
# the Kafka broker and Debezium (Kafka Connect) jars into the cache. Installs nothing when
# everything is there.
#
#   Postgres server binaries (initdb, pg_ctl, pg_recvlogical) and psql  <- apt: postgresql
#   unzip, xz (other Postgres majors from Maven, pgversions.sh)         <- apt: unzip xz-utils
#   kcat                                                                <- apt: kcat
#   java >= 17                                                          <- apt: openjdk-17-jre-headless
#   mvn                                                                 <- apt: maven
#   gcc (cgo, for go test -race)                                        <- apt: gcc libc6-dev
#   promtool (alert rule checks and unit tests)                         <- apt: prometheus
#   go                                                                  must be there already
#
# Also the Schema Registry kit `make test` starts: Apicurio Registry's runner (test/env/registry.sh
# fetch, which needs a Java 21 or newer, found by itself under /usr/lib/jvm) and the jars of the
# independent consumer (test/registry/consumer.sh fetch). The first fetch takes about 30 s on a
# machine with an empty Maven repository (some 250 MB from Maven Central, 233 MB in the cache);
# later ones are no-ops.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=deps

missing=()

# Debian's clients (psql, pg_isready, pg_recvlogical) serve every major, so Debian's
# postgresql is needed even when the tests run another major's server.
pgbin=/usr/lib/postgresql/15/bin
if [ ! -x "$pgbin/initdb" ]; then
	# pg.sh falls back to the newest installed major.
	alt="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
	[ -n "$alt" ] && pgbin="$alt"
fi
for b in initdb pg_ctl pg_isready pg_recvlogical; do
	if [ ! -x "$pgbin/$b" ]; then
		missing+=(postgresql)
		break
	fi
done
# WALRELAY_DEPS=demo (make demo): only what the demo uses, Postgres, Kafka and kcat.
demo=0
[ "${WALRELAY_DEPS:-all}" = demo ] && demo=1
command -v psql >/dev/null || missing+=(postgresql)
command -v kcat >/dev/null || missing+=(kcat)
if [ "$demo" = 0 ]; then
	command -v curl >/dev/null || missing+=(curl) # debezium.sh asks Kafka Connect's REST API
	command -v promtool >/dev/null || missing+=(prometheus)
	command -v unzip >/dev/null || missing+=(unzip)
	command -v xz >/dev/null || missing+=(xz-utils)
fi

java_major() {
	local j="java"
	[ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ] && j="$JAVA_HOME/bin/java"
	command -v "$j" >/dev/null || { echo 0; return; }
	"$j" -XshowSettings:properties -version 2>&1 |
		awk -F'= ' '/java.specification.version/ {split($2, v, "."); print (v[1] == 1 ? v[2] : v[1]); found=1} END {if (!found) print 0}'
}
jmaj="$(java_major)"
[ "$jmaj" -ge 17 ] || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v flock >/dev/null || missing+=(util-linux)
if [ "$demo" = 0 ]; then
	# go test -race needs cgo, hence a C compiler.
	command -v gcc >/dev/null || missing+=(gcc libc6-dev)
	# deploy/validate runs systemd-analyze verify on deploy/walrelay.service.
	command -v systemd-analyze >/dev/null || missing+=(systemd)
fi
command -v go >/dev/null || die "go is not installed; it must be on PATH"

if [ "${#missing[@]}" -gt 0 ]; then
	# unique, in order
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')
	is_root || die "missing: ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root"
	command -v apt-get >/dev/null || die "missing: ${missing[*]}; no apt-get here, install them by hand"
	log "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || log "apt-get update reported errors; trying the install anyway"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	[ "$(java_major)" -ge 17 ] || die "java on PATH is still older than 17; select 17 with update-alternatives --config java"
fi

log "postgres $("$pgbin/postgres" --version | awk '{print $3}') ($pgbin), kcat $(kcat -V 2>&1 | awk '/^Version/ {print $2}'), java $(java_major), $(mvn -v 2>/dev/null | head -n 1 | sed 's/\x1b\[[0-9;]*m//g'), $(go version | awk '{print $3}')"

# The Postgres major asked for (make test PG=17), installed now (no-op when it is).
if [ -n "${WALRELAY_TEST_PG_VERSION:-}" ]; then
	log "postgres $WALRELAY_TEST_PG_VERSION: $("$WALRELAY_ENV_DIR/pgversions.sh" bin "$WALRELAY_TEST_PG_VERSION")"
fi
# Warm the broker jar cache (no-op when cached).
"$WALRELAY_ENV_DIR/kafka.sh" fetch
[ "$demo" = 0 ] || exit 0
# Kafka Connect + Debezium for test/cutover_test.go (no-op when cached).
"$WALRELAY_ENV_DIR/debezium.sh" fetch
# The Schema Registry kit (no-op when cached). Without it the registry tests fail, loudly, but
# the rest of the suite still runs.
if ! "$WALRELAY_ENV_DIR/registry.sh" fetch || ! "$WALRELAY_ROOT/test/registry/consumer.sh" fetch; then
	log "WARNING: the Schema Registry test kit is not available (above): the schema registry tests will fail"
fi
