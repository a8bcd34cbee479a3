package main

import "testing"

// TestPrettySize: status prints the retained WAL as pg_size_pretty did when
// Postgres computed it (the expected values are pg_size_pretty's, Postgres 15).
func TestPrettySize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"}, {1, "1 bytes"}, {10239, "10239 bytes"}, {10240, "10 kB"}, {10752, "11 kB"}, {10753, "11 kB"},
		{1048575, "1024 kB"}, {20971008, "20 MB"}, {20971520, "20 MB"}, {16777216, "16 MB"}, {5368709120, "5120 MB"},
		{1099511627776, "1024 GB"}, {1125899906842624, "1024 TB"}, {9223372036854775807, "8192 PB"},
		{-10240, "-10 kB"}, {-16777216, "-16 MB"},
	} {
		if got := prettySize(tc.n); got != tc.want {
			t.Errorf("prettySize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
