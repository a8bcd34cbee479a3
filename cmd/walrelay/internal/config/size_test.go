package config

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	tooBig := strconv.FormatInt(math.MaxInt64, 10) + "0"
	cases := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "67108864", want: 67108864},
		{in: "0", want: 0},
		{in: "1B", want: 1},
		{in: "512KiB", want: 512 << 10},
		{in: "1MiB", want: 1 << 20},
		{in: "64MiB", want: 64 << 20},
		{in: " 64 MiB ", want: 64 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "1KB", want: 1000},
		{in: "1MB", want: 1000000},
		{in: "2GB", want: 2000000000},
		{in: "", wantErr: "is not a size"},
		{in: "MiB", wantErr: "is not a size"},
		{in: "1.5MiB", wantErr: "is not a size"},
		{in: "64mib", wantErr: "is not a size"},
		{in: "64M", wantErr: "is not a size"},
		{in: "64 MiB extra", wantErr: "is not a size"},
		{in: "-1", wantErr: "is negative"},
		{in: "-1MiB", wantErr: "is negative"},
		{in: tooBig, wantErr: "is too large"},
		{in: strconv.FormatInt(math.MaxInt64/2, 10) + "GiB", wantErr: "is too large"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := parseSize(c.in)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("parseSize(%q) = %d, %v; want error containing %q", c.in, got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("parseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 1 << 20: "1MiB", 64 << 20: "64MiB", 512 << 10: "512KiB", 1 << 30: "1GiB", 1000: "1000", 1536: "1536"} {
		if got := formatSize(in); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", in, got, want)
		}
	}
}

// TestSizeSettingsEverySource: the size settings take units from flags, env
// and YAML alike, and the defaults print as docs/configuration.md shows them.
func TestSizeSettingsEverySource(t *testing.T) {
	dir := t.TempDir()
	yml := filepath.Join(dir, "walrelay.yaml")
	if err := os.WriteFile(yml, []byte("max_buffered_bytes: 64MiB\nbatch_max_bytes: 512KiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name          string
		args          []string
		env           map[string]string
		batch, buffer int
	}{
		{"defaults", nil, nil, 1 << 20, 64 << 20},
		{"yaml", nil, map[string]string{"WALRELAY_CONFIG": yml}, 512 << 10, 64 << 20},
		{"env", nil, map[string]string{"WALRELAY_MAX_BUFFERED_BYTES": "128MiB", "WALRELAY_BATCH_MAX_BYTES": "1MB"}, 1000000, 128 << 20},
		{"flags", []string{"--batch-max-bytes", "2MiB", "--max-buffered-bytes=1GiB"}, nil, 2 << 20, 1 << 30},
		{"plain bytes", []string{"--max-buffered-bytes", "67108864"}, nil, 1 << 20, 64 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if cfg := mustLoad(t, c.args, c.env); cfg.BatchMaxBytes != c.batch || cfg.MaxBufferedBytes != c.buffer {
				t.Fatalf("batch %d buffer %d, want %d %d", cfg.BatchMaxBytes, cfg.MaxBufferedBytes, c.batch, c.buffer)
			}
		})
	}
	if _, err := loadRun(append(slices.Clone(minimalArgs), "--max-buffered-bytes", "lots"), envMap(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "max-buffered-bytes") {
		t.Fatalf("bad size: got %v, want an error naming max-buffered-bytes", err)
	}
	var usage strings.Builder
	_, _ = loadRun([]string{"-h"}, envMap(nil), &usage)
	for _, want := range []string{"(default 1MiB)", "(default 64MiB)"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("run -h does not print %q", want)
		}
	}
}
