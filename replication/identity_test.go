package replication

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/test/pgtest"
)

// TestOpenRecordsIdentity: Open records the server's system identifier and
// timeline (IDENTIFY_SYSTEM), the same ones pg_control_system() and
// pg_control_checkpoint() report.
func TestOpenRecordsIdentity(t *testing.T) {
	dsn := pgtest.Database(t, "ident")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var sysid string
	var tli int32
	if err := db.QueryRow(ctx, "SELECT (SELECT system_identifier::text FROM pg_control_system()), (SELECT timeline_id FROM pg_control_checkpoint())").Scan(&sysid, &tli); err != nil {
		t.Fatal(err)
	}
	c, err := Open(ctx, Config{DSN: dsn, Slot: "ident", Publication: "ident"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	want := Identity{SystemID: sysid, Timeline: tli}
	if c.System != want {
		t.Fatalf("Conn.System = %v, want %v", c.System, want)
	}
	if !c.System.SameHistory(want) || c.System.SameHistory(Identity{SystemID: sysid, Timeline: tli + 1}) ||
		c.System.SameHistory(Identity{SystemID: sysid + "0", Timeline: tli}) {
		t.Errorf("SameHistory: same identity must match, another timeline or system id must not")
	}
	t.Logf("identity %s", c.System)
}
