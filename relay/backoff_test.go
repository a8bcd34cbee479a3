package relay

import (
	"testing"
	"time"
)

func TestResetBackoff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wait     time.Duration
		streamed bool
		lasted   time.Duration
		want     time.Duration
	}{
		{"streamed longer than the wait: back to the minimum", 8 * time.Second, true, 10 * time.Second, backoffMin},
		{"long session at the maximum wait", backoffMax, true, 2 * time.Minute, backoffMin},
		{"streamed, but failed sooner than the wait", 8 * time.Second, true, 3 * time.Second, 8 * time.Second},
		{"never streamed (slot in use), however long", 8 * time.Second, false, time.Minute, 8 * time.Second},
		{"first failure", backoffMin, true, 100 * time.Millisecond, backoffMin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resetBackoff(tc.wait, tc.streamed, tc.lasted); got != tc.want {
				t.Errorf("resetBackoff(%v, %v, %v) = %v, want %v", tc.wait, tc.streamed, tc.lasted, got, tc.want)
			}
		})
	}
}
