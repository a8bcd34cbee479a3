package replication

import (
	"reflect"
	"testing"
)

func TestParseHistory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    []TimelineSwitch
		bad     bool
	}{
		{"one promotion", "1\t0/3000158\tno recovery target specified\n", []TimelineSwitch{{1, 0x3000158}}, false},
		{"two, blank and comment lines", "# comment\n1\t0/3000158\tno recovery target specified\n\n2\t0/5000000\tbefore 2026-11-25 12:00:00+00\n",
			[]TimelineSwitch{{1, 0x3000158}, {2, 0x5000000}}, false},
		{"a skipped timeline (an abandoned branch)", "1\t0/3000158\treason\n3\t0/4000000\treason\n", []TimelineSwitch{{1, 0x3000158}, {3, 0x4000000}}, false},
		{"empty", "", nil, false},
		{"missing switch", "1\n", nil, true},
		{"bad timeline", "x\t0/1\n", nil, true},
		{"bad lsn", "1\tzz\n", nil, true},
		{"timelines out of order", "2\t0/5\tr\n1\t0/6\tr\n", nil, true},
		{"switch points going back", "1\t0/6\tr\n2\t0/5\tr\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHistory([]byte(tc.content))
			if (err != nil) != tc.bad {
				t.Fatalf("ParseHistory error = %v, want error %v", err, tc.bad)
			}
			if !tc.bad && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseHistory = %v, want %v", got, tc.want)
			}
		})
	}
}
