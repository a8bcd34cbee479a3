package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/operator"
)

// TestRedriveDryRunLines: a dry run says per dead letter where it would go
// and, for one that would be dead-lettered again, why; the same item that a
// real run logs with its cause.
func TestRedriveDryRunLines(t *testing.T) {
	cases := []struct {
		name string
		item operator.RedriveItem
		want []string
	}{
		{"sent from its row", operator.RedriveItem{Partition: 0, Offset: 7, ID: "e1", Reason: "topic_refused", Target: "orders", FromRow: true, Table: "public.outbox", Outcome: operator.RedriveWouldSend},
			[]string{"0/7 id e1 reason topic_refused: would go to orders, from its row in public.outbox"}},
		{"dead-lettered again", operator.RedriveItem{Partition: 1, Offset: 3, ID: "e2", Reason: "topic_refused", Target: "walrelay.dlq", Outcome: operator.RedriveDeadLettered,
			Cause: errors.New("the table places columns in the record's envelope and the row is no longer in the outbox table")},
			[]string{"1/3 id e2 reason topic_refused: would go to walrelay.dlq again, from the stored record: the table places columns in the record's envelope"}},
		{"filtered", operator.RedriveItem{Partition: 2, Offset: 5, ID: "e3", Reason: "too_large", FromRow: true, Table: "public.outbox", Outcome: operator.RedriveFiltered},
			[]string{"2/5 id e3 reason too_large: would not go, its table's filter no longer publishes it (from its row in public.outbox)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			printRedriveItem(&call{stdout: &out}, true, tc.item)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("dry run printed %q, want it to contain %q", out.String(), w)
				}
			}
		})
	}
}
