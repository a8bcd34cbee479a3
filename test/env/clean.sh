#!/usr/bin/env bash
# `make clean`: stop whatever the test, up, demo and bench scripts left running and remove their
# state dirs, except those whose lock a running test, demo or bench holds. The jar cache (${WALRELAY_CACHE:-$HOME/.cache/walrelay}) is kept.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=clean

for dir in "${WALRELAY_TEST_DIR:-/tmp/walrelay-test}" "${WALRELAY_UP_DIR:-/tmp/walrelay-up}" \
	"${WALRELAY_DEMO_DIR:-/tmp/walrelay-demo}" "${WALRELAY_BENCH_DIR:-/tmp/walrelay-bench}"; do
	[ -d "$dir" ] || continue
	# A running test, demo or bench holds its lock: its services are not ours to stop.
	if [ -f "$dir.lock" ] && ! (flock -n 9) 9<"$dir.lock"; then
		log "$dir.lock is held by a running test, demo or bench; $dir left alone"
		continue
	fi
	log "cleaning $dir"
	stop_services "$dir"
	safe_wipe "$dir"
done
# The lock files run-tests.sh takes beside its state dir (take_lock), unless a run holds one.
for dir in "${WALRELAY_TEST_DIR:-/tmp/walrelay-test}" "${WALRELAY_DEMO_DIR:-/tmp/walrelay-demo}" \
	"${WALRELAY_BENCH_DIR:-/tmp/walrelay-bench}"; do
	[ -f "$dir.lock" ] || continue
	if (flock -n 9 && rm -f "$dir.lock") 9<"$dir.lock"; then
		log "removed $dir.lock"
	else
		log "$dir.lock is held by a running test, demo or bench; left in place"
	fi
done
