# shellcheck shell=bash
# Shared helpers for the test/env scripts. Source it; it does not run anything by itself.
#
# Environment (all optional):
#   WALRELAY_TEST_DIR       state directory of the throwaway services (default /tmp/walrelay-test)
#   WALRELAY_TEST_REGISTRY  if set, every started service appends "<kind> <WALRELAY_TEST_DIR>"
#                           to this file so run-tests.sh can stop clusters that tests started
#                           themselves (for example a second Postgres with wal_level=replica).

WALRELAY_ENV_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034 # used by the scripts that source this file
WALRELAY_ROOT="$(cd "$WALRELAY_ENV_DIR/../.." && pwd)"
WALRELAY_TEST_DIR="${WALRELAY_TEST_DIR:-/tmp/walrelay-test}"

log() { printf '[%s %s] %s\n' "$(date +%H:%M:%S)" "${WALRELAY_LOG_TAG:-env}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# abs_path PATH: absolute form of PATH without requiring it to exist.
abs_path() {
	case "$1" in
	/*) printf '%s\n' "$1" ;;
	*) printf '%s/%s\n' "$(pwd)" "$1" ;;
	esac
}

# emit_export NAME VALUE: print a shell-safe `export NAME='VALUE'` line.
emit_export() {
	local v="${2//\'/\'\\\'\'}"
	printf "export %s='%s'\n" "$1" "$v"
}

# register KIND: remember that a service of KIND was started in $WALRELAY_TEST_DIR.
register() {
	[ -n "${WALRELAY_TEST_REGISTRY:-}" ] || return 0
	local line="$1 $WALRELAY_TEST_DIR"
	touch "$WALRELAY_TEST_REGISTRY" 2>/dev/null || return 0
	grep -qxF "$line" "$WALRELAY_TEST_REGISTRY" 2>/dev/null || printf '%s\n' "$line" >>"$WALRELAY_TEST_REGISTRY"
}

# pid_alive PID: true while PID exists and is not a fully exited zombie. A multi-threaded
# process (the JVM) shows its leader as Z while other threads still exit and hold its sockets.
pid_alive() {
	local pid="$1" state
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	state="$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)"
	[ "$state" != "Z" ] && return 0
	[ "$(ls "/proc/$pid/task" 2>/dev/null | wc -l)" -gt 1 ]
}

# wait_pid_gone PID SECONDS: wait until PID has exited; false on timeout.
wait_pid_gone() {
	local pid="$1" deadline=$((SECONDS + $2))
	while pid_alive "$pid"; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# wait_until SECONDS CMD...: run CMD every 0.2 s until it succeeds; false after SECONDS.
wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# safe_wipe DIR: remove a state directory, but only one that is ours (empty, missing, or marked).
safe_wipe() {
	local dir
	dir="$(abs_path "$1")"
	case "$dir" in
	/ | /tmp | /tmp/ | /root | /home | /usr* | /etc* | /var | "$HOME") die "refusing to wipe $dir" ;;
	esac
	if [ -d "$dir" ] && [ ! -e "$dir/.walrelay-test" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
		die "refusing to wipe $dir: it is not empty and has no .walrelay-test marker"
	fi
	rm -rf "$dir"
}

# ensure_state_dir DIR: create DIR with the marker that allows safe_wipe to remove it later.
ensure_state_dir() {
	mkdir -p "$1"
	[ -e "$1/.walrelay-test" ] || : >"$1/.walrelay-test"
}

# stop_services DIR: stop what pg.sh / kafka.sh / registry.sh / demo / bench started under state
# dir DIR: walrelay processes with a pid file there, services in DIR/services (newest first, e.g.
# a second cluster or registry a test started), then DIR's own schema registry, Kafka and
# Postgres. Never fails.
stop_services() {
	local dir="$1" pf pid kind sdir
	[ -d "$dir" ] || return 0
	for pf in "$dir"/walrelay*.pid; do
		[ -f "$pf" ] || continue
		pid="$(cat "$pf" 2>/dev/null || true)"
		if pid_alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q walrelay; then
			kill -TERM "$pid" 2>/dev/null || true
			wait_pid_gone "$pid" 30 || kill -KILL "$pid" 2>/dev/null || true
		fi
		rm -f "$pf"
	done
	if [ -f "$dir/services" ]; then
		while read -r kind sdir; do
			[ "$sdir" = "$dir" ] && continue
			case "$kind" in
			pg | kafka) stop_if_running "$kind" "$sdir" ;;
			schema-registry) stop_registry "$sdir" ;;
			esac
		done < <(tac "$dir/services")
	fi
	# The Debezium worker (test/cutover_test.go) before the broker and Postgres it uses.
	if [ -f "$dir/debezium/connect.pid" ]; then
		WALRELAY_TEST_DIR="$dir" "$WALRELAY_ENV_DIR/debezium.sh" stop 8>&- 9>&- || true
	fi
	# The schema registry (test/env/registry.sh), also one a test started with its own state dir.
	stop_registry "$dir"
	stop_if_running kafka "$dir"
	stop_if_running pg "$dir"
}

# stop_registry DIR: stop DIR's schema registry when it runs; quiet when it does not.
stop_registry() {
	[ -f "$1/schema-registry/registry.pid" ] || return 0
	WALRELAY_TEST_DIR="$1" "$WALRELAY_ENV_DIR/registry.sh" stop 8>&- 9>&- || true
}

# stop_if_running KIND DIR: stop DIR's KIND (pg, kafka) when it runs; quiet when it does not.
stop_if_running() {
	WALRELAY_TEST_DIR="$2" "$WALRELAY_ENV_DIR/$1.sh" status >/dev/null 2>&1 8>&- 9>&- || return 0
	WALRELAY_TEST_DIR="$2" "$WALRELAY_ENV_DIR/$1.sh" stop 8>&- 9>&- || true
}

# port_in_use PORT: true when a socket on 127.0.0.1 (listening or connected) has local port PORT.
port_in_use() {
	[ -n "$(ss -Htan "( sport = :$1 )" 2>/dev/null)" ] && return 0
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port_block N: print a port P such that P .. P+N-1 are all unused. They lie outside the
# kernel's ephemeral range (net.ipv4.ip_local_port_range, read only), so no outgoing
# connection can take one of them between this check and the service's bind.
free_port_block() {
	local n="$1" lo=32768 hi=60999 min max p i try
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	if [ "$lo" -gt $((11000 + n)) ]; then
		min=10000 max=$((lo - n))
	else
		min=$((hi + 1)) max=$((65535 - n))
	fi
	[ "$max" -gt "$min" ] || return 1
	for ((try = 0; try < 200; try++)); do
		p=$((min + (RANDOM * 32768 + RANDOM) % (max - min)))
		for ((i = 0; i < n; i++)); do
			port_in_use $((p + i)) && continue 2
		done
		echo "$p"
		return 0
	done
	return 1
}

# pick_port DEFAULT N: print DEFAULT when DEFAULT .. DEFAULT+N-1 are all unused, else a free
# block (free_port_block N), so `make up`, `make demo` and `make bench` start beside whatever
# already listens on their default ports.
pick_port() {
	local i
	for ((i = 0; i < $2; i++)); do
		if port_in_use $(($1 + i)); then
			free_port_block "$2"
			return
		fi
	done
	echo "$1"
}

# fresh_state_dir DIR: take DIR's lock (take_lock), install what is missing, stop what an
# earlier run left under DIR and start from an empty DIR: no slots or topics leak from an
# earlier run.
fresh_state_dir() {
	take_lock "$1"
	"$WALRELAY_ENV_DIR/deps.sh" 8>&-
	stop_services "$1"
	safe_wipe "$1"
	ensure_state_dir "$1"
}

# take_lock DIR: hold DIR.lock on fd 8 for the rest of the calling script (one run per state
# dir: several people may share this machine and its ports). Children must not inherit fd 8:
# run them with 8>&-.
take_lock() {
	exec 8>"$1.lock"
	if ! flock -n 8; then
		log "another run holds $1.lock; waiting for it"
		flock 8
	fi
}

# maven_jars LIBS POM WHAT REQUIRED [MVN_ARGS...]: resolve POM's dependencies into LIBS once
# (a cache outside the work tree). One resolver at a time (flock on LIBS/../.lock, fd 9); the
# jars land in a temporary dir that becomes LIBS only when complete (LIBS/.complete lists them).
# WHAT names the artifacts in messages; REQUIRED lists jar files that must be among them.
maven_jars() {
	local libs="$1" pom="$2" what="$3" required="$4"
	shift 4
	[ -f "$libs/.complete" ] && return 0
	command -v mvn >/dev/null || die "mvn not found (run test/env/deps.sh)"
	local cache
	cache="$(dirname "$libs")"
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if [ ! -f "$libs/.complete" ]; then
		local tmp="$cache/libs.tmp.$$" t0=$SECONDS j
		rm -rf "$tmp"
		log "resolving $what from Maven into $libs"
		if ! mvn -B -q -Dstyle.color=never -f "$pom" "$@" \
			dependency:copy-dependencies -DoutputDirectory="$tmp" >"$cache/mvn.log" 2>&1; then
			sed 's/\x1b\[[0-9;]*m//g' "$cache/mvn.log" >&2
			rm -rf "$tmp"
			die "maven could not resolve $what (log: $cache/mvn.log)"
		fi
		for j in $required; do
			[ -f "$tmp/$j" ] || die "$j missing after resolution"
		done
		ls "$tmp" >"$tmp/.complete"
		rm -rf "$libs"
		mv "$tmp" "$libs"
		log "resolved $(($(wc -l <"$libs/.complete"))) jars in $((SECONDS - t0)) s"
	fi
	exec 9>&-
}

# java_bin: the java to run ($JAVA_HOME's when set).
java_bin() {
	if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
		printf '%s\n' "$JAVA_HOME/bin/java"
	else
		command -v java || die "java not found (run test/env/deps.sh)"
	fi
}
