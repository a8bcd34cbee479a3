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

# terminate PID SECONDS: SIGTERM, wait up to SECONDS for PID to exit, then SIGKILL and wait up
# to 10 s more; false when PID survives even that.
terminate() {
	local pid="$1"
	kill -TERM "$pid" 2>/dev/null || true
	wait_pid_gone "$pid" "$2" && return 0
	log "pid $pid: no exit after $2 s; SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	wait_pid_gone "$pid" 10
}

# Services started in the background (kafka.sh, registry.sh, debezium.sh): a pid file in the
# state dir, a mark on the command line that tells the service from a process that got a
# recycled pid, and the same start, wait, stop, kill and status for each.

# port_open PORT: something accepts connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_ports_free SECONDS PORT...: wait until nothing accepts on any PORT; die naming the first
# one still taken after SECONDS (a service of an earlier run may still be exiting).
wait_ports_free() {
	local deadline=$((SECONDS + $1)) p
	shift
	for p in "$@"; do
		while port_open "$p"; do
			[ "$SECONDS" -lt "$deadline" ] || die "port 127.0.0.1:$p is taken by another process"
			sleep 0.2
		done
	done
}

# service_pid PIDFILE MARK: print the pid in PIDFILE when that process runs and its command line
# holds MARK; false otherwise.
service_pid() {
	local pid
	pid="$(cat "$1" 2>/dev/null || true)"
	[ -n "$pid" ] && pid_alive "$pid" || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2" || return 1
	printf '%s\n' "$pid"
}

# spawn_service DIR OUT PIDFILE CMD...: start CMD in the background in directory DIR, stdin from
# /dev/null, stdout and stderr appended to OUT; write its pid to PIDFILE and to SERVICE_PID. CMD
# runs in a session of its own (setsid) so that a Ctrl-C on the caller's terminal does not reach
# it before the caller's cleanup stops it; setsid would fork (and lose the pid) in a group
# leader, so it is used only when the subshell is not one.
spawn_service() {
	local dir="$1" out="$2" pidfile="$3"
	shift 3
	(
		cd "$dir"
		pre=()
		if [ "$(cut -d' ' -f5 "/proc/$BASHPID/stat")" != "$BASHPID" ]; then pre=(setsid); fi
		exec "${pre[@]}" "$@"
	) </dev/null >>"$out" 2>&1 &
	SERVICE_PID=$!
	printf '%s\n' "$SERVICE_PID" >"$pidfile"
}

# await_service WHAT PID SECONDS LOGS PORTS CHECK...: run CHECK every 0.3 s until it succeeds.
# When PID exits first or SECONDS pass, print the tail of LOGS (a space-separated list; when
# they say "Address already in use", also the sockets on PORTS) and die naming WHAT.
await_service() {
	local what="$1" pid="$2" deadline=$((SECONDS + $3)) logs="$4" ports="$5" p filter=""
	shift 5
	until "$@"; do
		if ! pid_alive "$pid" || [ "$SECONDS" -ge "$deadline" ]; then
			# shellcheck disable=SC2086 # one path per word
			tail -n 40 $logs >&2 2>/dev/null || true
			# shellcheck disable=SC2086
			if [ -n "$ports" ] && grep -qs "Address already in use" $logs; then
				for p in $ports; do filter+="${filter:+ or }sport = :$p"; done
				log "sockets on 127.0.0.1 port $ports:"
				ss -tanp "( $filter )" >&2 2>/dev/null || true
			fi
			pid_alive "$pid" || die "$what exited during startup (logs: $logs)"
			die "$what did not answer within $3 s (logs: $logs)"
		fi
		sleep 0.3
	done
}

# stop_service PIDFILE MARK SECONDS: SIGTERM the service of PIDFILE (service_pid) and wait for
# its exit, SIGKILL after SECONDS; remove PIDFILE. Says "not running" when it does not run.
stop_service() {
	local pid
	if ! pid="$(service_pid "$1" "$2")"; then
		rm -f "$1"
		log "not running"
		return
	fi
	log "stopping (pid $pid)"
	terminate "$pid" "$3" || die "pid $pid survives SIGKILL"
	rm -f "$1"
}

# kill_service PIDFILE MARK: SIGKILL the service of PIDFILE (fault tests) and wait for its exit.
kill_service() {
	local pid
	if ! pid="$(service_pid "$1" "$2")"; then
		log "not running"
		return
	fi
	log "SIGKILL (pid $pid)"
	kill -KILL "$pid" 2>/dev/null || true
	wait_pid_gone "$pid" 10 || die "pid $pid survives SIGKILL"
	rm -f "$1"
}

# service_status NAME WHERE STATE PIDFILE MARK: print whether the service runs; exit status 3
# when it does not.
service_status() {
	local pid
	if pid="$(service_pid "$4" "$5")"; then
		echo "$1 running on $2 (pid $pid, state $3)"
	else
		echo "$1 not running (state $3)"
		return 3
	fi
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
			terminate "$pid" 30 || true
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
