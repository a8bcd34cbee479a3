package config

import (
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "72h", want: 72 * time.Hour},
		{in: "90m", want: 90 * time.Minute},
		{in: "3d", want: 72 * time.Hour},
		{in: " 1d12h ", want: 36 * time.Hour},
		{in: "0d", want: 0},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "", bad: true},
		{in: "d", bad: true},
		{in: "3", bad: true},
		{in: "-1d", bad: true},
		{in: "1d-1h", bad: true},
		{in: "1.5d", bad: true},
		{in: "3days", bad: true},
		{in: "99999d", bad: true},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := parseAge(c.in)
			if c.bad {
				if err == nil {
					t.Errorf("parseAge(%q) = %v, want an error", c.in, got)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("parseAge(%q) = %v, %v; want %v", c.in, got, err, c.want)
			}
		})
	}
}

// prune runs `walrelay prune args...` with env as the environment.
