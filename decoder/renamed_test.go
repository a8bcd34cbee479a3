package decoder

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// TestRenamedOutboxTableStops: a publication holds its tables by OID, so an outbox
// table renamed (ALTER TABLE ... RENAME) or moved (SET SCHEMA) keeps sending its inserts,
// under the new name. They are outbox events: they must stop the stream with an error
// naming both names and the fix, never be ignored as an unmapped table. Other tables of a
// FOR ALL TABLES publication stay ignored.
func TestRenamedOutboxTableStops(t *testing.T) {
	const oid = relOutbox
	readAt := walBase + 0x1000 // OIDs read at this WAL position
	before, after := readAt-0x10, readAt+0x10

	type step struct {
		rel    []byte        // a Relation message, or nil
		id     uint32        // relation of the insert; 0: the outbox's OID
		lsn    pglogrepl.LSN // of the insert that follows
		insert bool          // an outbox-shaped insert into oid
		want   string        // "event <table>", "ignored <table>" or "renamed"
	}
	tests := []struct {
		name   string
		oids   bool // configure public.outbox with its OID and OIDsReadAt
		steps  []step
		errHas []string // in the renamed error
	}{
		{"renamed in the session", false, []step{
			{rel: encRelation(oid, "public", "outbox", outboxCols...), lsn: after, insert: true, want: "event public.outbox"},
			{rel: encRelation(oid, "public", "outbox_old", outboxCols...), lsn: after, insert: true, want: "renamed"},
		}, []string{"public.outbox ", "public.outbox_old", `ALTER TABLE "public"."outbox_old" RENAME TO "outbox";`, "configure the outbox table as public.outbox_old", "restart"}},
		{"moved to another schema in the session", false, []step{
			{rel: encRelation(oid, "public", "outbox", outboxCols...), lsn: after, insert: true, want: "event public.outbox"},
			{rel: encRelation(oid, "app", "outbox", outboxCols...), lsn: after, insert: true, want: "renamed"},
		}, []string{"app.outbox", `ALTER TABLE "app"."outbox" SET SCHEMA "public";`}},
		{"renamed and moved", false, []step{
			{rel: encRelation(oid, "public", "outbox", outboxCols...), lsn: after, insert: true, want: "event public.outbox"},
			{rel: encRelation(oid, "app", "Old Box", outboxCols...), lsn: after, insert: true, want: "renamed"},
		}, []string{`ALTER TABLE "app"."Old Box" RENAME TO "outbox"; ALTER TABLE "app"."outbox" SET SCHEMA "public";`}},
		{"known OID under a new name, first Relation of the session", true, []step{
			{rel: encRelation(oid, "public", "outbox_old", outboxCols...), lsn: after, insert: true, want: "renamed"},
		}, []string{"public.outbox ", "(oid 16400)", "public.outbox_old"}},
		{"known OID under an older name: the table's events (restart with the new name)", true, []step{
			{rel: encRelation(oid, "public", "outbox_old", outboxCols...), lsn: before, insert: true, want: "event public.outbox"},
			{rel: encRelation(oid, "public", "outbox", outboxCols...), lsn: after, insert: true, want: "event public.outbox"},
		}, nil},
		{"known OID under an older name, then past the OID lookup under it", true, []step{
			{rel: encRelation(oid, "public", "outbox_old", outboxCols...), lsn: before, insert: true, want: "event public.outbox"},
			{lsn: after, insert: true, want: "renamed"},
		}, nil},
		{"renamed back", false, []step{
			{rel: encRelation(oid, "public", "outbox", outboxCols...), lsn: after, insert: true, want: "event public.outbox"},
			{rel: encRelation(oid, "public", "outbox_old", outboxCols...)},
			{rel: encRelation(oid, "public", "outbox", outboxCols...), lsn: after, insert: true, want: "event public.outbox"},
		}, nil},
		{"another table under another OID stays ignored (FOR ALL TABLES)", true, []step{
			{rel: encRelation(9999, "public", "outbox_old", outboxCols...)},
			{rel: encRelation(oid, "public", "outbox", outboxCols...), lsn: after, insert: true, want: "event public.outbox"},
		}, nil},
		{"the configured name under another OID (recreated table)", true, []step{
			{rel: encRelation(oid+100, "public", "outbox", outboxCols...), id: oid + 100, lsn: after, insert: true, want: "event public.outbox"},
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oc := DefaultColumns()
			oc.Timestamp = "created_at"
			cfg := Config{Tables: []Table{{Name: "outbox", Columns: oc}}}
			if tt.oids {
				cfg.Tables[0].OID, cfg.OIDsReadAt = oid, readAt
			}
			d, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var out Output
			mustDecode(t, d, walBase, encBegin(walBase+0x2000, commitTime, 700), &out)
			for i, st := range tt.steps {
				if st.rel != nil {
					mustDecode(t, d, 0, st.rel, &out)
				}
				if !st.insert {
					continue
				}
				id := uint32(oid)
				if st.id != 0 {
					id = st.id
				}
				err := d.Decode(st.lsn, encInsert(id, goodRow()...), &out)
				if st.want == "renamed" {
					var re *TableRenamedError
					if !errors.Is(err, ErrTableRenamed) || !errors.As(err, &re) {
						t.Fatalf("step %d: err = %v, want a *TableRenamedError", i, err)
					}
					if out.Kind != KindNone {
						t.Errorf("step %d: output %s with the error, want none", i, out.Kind)
					}
					for _, s := range tt.errHas {
						if !strings.Contains(err.Error(), s) {
							t.Errorf("step %d: error %q does not contain %q", i, err, s)
						}
					}
					t.Logf("error: %v", err)
					return
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got := out.Kind.String() + " " + out.Table
				if out.Kind == KindEvent {
					got = "event " + out.Event.Table
				}
				if got != st.want {
					t.Fatalf("step %d: got %s, want %s", i, got, st.want)
				}
				if out.Kind == KindEvent && out.Event.TableName != "outbox" {
					t.Errorf("step %d: TableName %q, want the configured outbox", i, out.Event.TableName)
				}
			}
			// Whatever the steps, an unrelated table of the publication is ignored.
			mustDecode(t, d, 0, encRelation(4242, "public", "orders", rc{"id", oidText}), &out)
			mustDecode(t, d, after, encInsert(4242, txt("o-1")), &out)
			if out.Kind != KindIgnored || out.Reason != ReasonUnmappedTable || out.Table != "public.orders" {
				t.Fatalf("insert into another table: got %s %s %s", out.Kind, out.Reason, out.Table)
			}
		})
	}

	t.Run("update and delete of the renamed table are ignored as the outbox's", func(t *testing.T) {
		d := newTestDecoder(t, true)
		var out Output
		mustDecode(t, d, 0, encRelation(relOutbox, "public", "outbox_old", outboxCols...), &out)
		mustDecode(t, d, walBase, encDelete(relOutbox, 'K', txt("id")), &out)
		if out.Kind != KindIgnored || out.Reason != ReasonDelete {
			t.Fatalf("got %s %s", out.Kind, out.Reason)
		}
	})
	t.Run("one OID for two tables is refused", func(t *testing.T) {
		_, err := New(Config{Tables: []Table{{Name: "a", OID: 7}, {Name: "b", OID: 7}}})
		if err == nil || !strings.Contains(err.Error(), "OID 7") {
			t.Fatalf("err = %v", err)
		}
	})
}
