package replication

import "testing"

func TestFailoverSlotSQL(t *testing.T) {
	for _, tc := range []struct{ slot, want string }{
		{"walrelay", `CREATE_REPLICATION_SLOT "walrelay" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)`},
		{"orders_1", `CREATE_REPLICATION_SLOT "orders_1" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)`},
	} {
		t.Run(tc.slot, func(t *testing.T) {
			if got := failoverSlotSQL(tc.slot); got != tc.want {
				t.Errorf("failoverSlotSQL(%q) = %s, want %s", tc.slot, got, tc.want)
			}
		})
	}
}
