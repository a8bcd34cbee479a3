#!/usr/bin/env bash
# The tables of test/bench/debezium.sh from its machine lines (CATCHUP, LATSTEP, INFO), as
# medians over runs / repeats:  debezium-report.sh LINES_FILE
set -euo pipefail
LINES="${1:?usage: debezium-report.sh LINES_FILE}"
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"; }
info() { sed -n "s/^INFO $1=//p" "$LINES" | tail -n 1; }
median() {
	printf '%s\n' "$@" | awk '$1 ~ /^[0-9.]+$/' | sort -g |
		awk '{a[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.6g\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
echo
echo "walrelay vs Debezium: $(info date)"
echo "machine: $(info machine)"
echo "versions: $(info versions)"
echo "Debezium $(info debezium)"
[ -z "$(info walrelay)" ] || echo "walrelay $(info walrelay)"
if grep -q '^CATCHUP' "$LINES"; then
	echo
	echo "catch-up: $(info catchup); events/s = N / (last record's broker append - slot held); medians over runs"
	echo "(vs recv: median of the per-run ratios to pg_recvlogical; CPU s: CPU-seconds of the whole drain incl. start-up; HWM: peak RSS)"
	printf '%-7s %-14s | %9s %7s %8s %7s | %7s %6s %6s | %s\n' payload tool "events/s" "MB/s" "drain s" "start s" "vs recv" "CPU s" "HWM MB" "events/s per run"
	for payload in $(sed -n 's/^CATCHUP payload=\([0-9]*\) .*/\1/p' "$LINES" | awk '!seen[$1]++'); do
		for tool in recv wr dd dt; do
			mapfile -t ls < <(grep "^CATCHUP payload=$payload .* tool=$tool " "$LINES")
			[ "${#ls[@]}" -gt 0 ] || continue
			eps=() mbs=() ds=() ss=() cs=() hs=() rat=()
			for l in "${ls[@]}"; do
				eps+=("$(field "$l" eps)") mbs+=("$(field "$l" mb_s)") ds+=("$(field "$l" drain_s)")
				ss+=("$(field "$l" start_s)") cs+=("$(field "$l" cpu_s)") hs+=("$(field "$l" hwm_mb)")
				r="$(field "$l" run)"
				re="$(field "$(grep "^CATCHUP payload=$payload .* run=$r .* tool=recv " "$LINES" | head -n 1)" eps)"
				rat+=("$(awk -v a="$(field "$l" eps)" -v b="$re" 'BEGIN {if (b > 0) printf "%.3f", a / b}')")
			done
			case "$tool" in recv) name=pg_recvlogical ;; wr) name=walrelay ;; dd) name=dbz-default ;; dt) name=dbz-tuned ;; esac
			printf '%-7s %-14s | %9.0f %7.1f %8.2f %7.2f | %7.2f %6s %6s | %s\n' "$payload" "$name" "$(median "${eps[@]}")" "$(median "${mbs[@]}")" \
				"$(median "${ds[@]}")" "$(median "${ss[@]}")" "$(median "${rat[@]}")" "$(median "${cs[@]}")" "$(median "${hs[@]}")" "${eps[*]}"
		done
	done
fi
if grep -q '^LATSTEP' "$LINES"; then
	echo
	echo "latency: $(info latency); commit (pg_xact_commit_timestamp) -> consumer receive, ms; medians over repeats"
	echo "(CPU s/min: CPU-seconds per minute of wall time over the step; RSS: VmRSS at the step's end; HWM: VmHWM)"
	printf '%-6s %-12s | %7s %7s %7s %7s | %9s %6s %6s | %s\n' step tool p50 p99 p99.9 max "CPU s/min" "RSS MB" "HWM MB" "p99 per repeat"
	for s in $(sed -n 's/^LATSTEP step=\([^ ]*\) .*/\1/p' "$LINES" | awk '!seen[$1]++'); do
		for tool in walrelay dbz-default dbz-tuned; do
			mapfile -t ls < <(grep "^LATSTEP step=$s .* tool=$tool " "$LINES")
			[ "${#ls[@]}" -gt 0 ] || continue
			a=() b=() c=() d=() e=() f=() g=()
			for l in "${ls[@]}"; do
				a+=("$(field "$l" cts_p50_ms)") b+=("$(field "$l" cts_p99_ms)") c+=("$(field "$l" cts_p999_ms)") d+=("$(field "$l" cts_max_ms)")
				e+=("$(field "$l" cpu_s_per_min)") f+=("$(field "$l" rss_mb)") g+=("$(field "$l" hwm_mb)")
			done
			printf '%-6s %-12s | %7s %7s %7s %7s | %9s %6s %6s | %s\n' "$s" "$tool" "$(median "${a[@]}")" "$(median "${b[@]}")" \
				"$(median "${c[@]}")" "$(median "${d[@]}")" "$(median "${e[@]}")" "$(median "${f[@]}")" "$(median "${g[@]}")" "${b[*]}"
		done
	done
	# Together steps: walrelay's p99 over Debezium's, per repeat (same writes, same run).
	for s in wr+dd wr+dt; do
		mapfile -t reps < <(grep "^LATSTEP step=$s " "$LINES" | sed -n 's/.* rep=\([0-9]*\) .*/\1/p' | sort -un)
		[ "${#reps[@]}" -gt 0 ] || continue
		rs=()
		for r in "${reps[@]}"; do
			w="$(field "$(grep "^LATSTEP step=$s rep=$r tool=walrelay " "$LINES" | head -n 1)" cts_p99_ms)"
			d="$(field "$(grep "^LATSTEP step=$s rep=$r tool=dbz-" "$LINES" | head -n 1)" cts_p99_ms)"
			rs+=("$(awk -v a="$w" -v b="$d" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')")
		done
		echo "$s: walrelay p99 / Debezium p99 in the same run: ${rs[*]} (median $(median "${rs[@]}"))"
	done
fi
echo
grep -v '^INFO' "$LINES"
