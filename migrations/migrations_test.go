package migrations_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/migrations"
	"github.com/walrelay/walrelay/test/pgtest"
)

// TestLockKey: every file that takes the migrations' advisory lock takes LockKey,
// the one CreateSchema takes, so concurrent migrate runs serialize on one lock.
func TestLockKey(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	part, err := migrations.Partitioned()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("pg_advisory_xact_lock(%d)", migrations.LockKey)
	locking := 0
	for _, m := range append(all, part...) {
		if n := strings.Count(m.SQL, "pg_advisory_xact_lock("); n > 0 {
			locking++
			if strings.Count(m.SQL, want) != n {
				t.Errorf("%s takes an advisory lock other than %s", m.Name, want)
			}
		}
	}
	if locking == 0 {
		t.Error("no migration takes the advisory lock")
	}
	if got := migrations.CreateSchema(`"app"`); !strings.Contains(got, want) || !strings.HasSuffix(got, `CREATE SCHEMA IF NOT EXISTS "app"`) {
		t.Errorf("CreateSchema: %s", got)
	}
}

func TestFiles(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	part, err := migrations.Partitioned()
	if err != nil {
		t.Fatal(err)
	}
	names := func(ms []migrations.Migration) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	if got, want := strings.Join(names(all), " "), "001_outbox.sql 002_emit.sql 003_time_column.sql"; got != want {
		t.Errorf("All() = %s, want %s", got, want)
	}
	if got, want := strings.Join(names(part), " "), "partitioned/001_outbox_partitioned.sql"; got != want {
		t.Errorf("Partitioned() = %s, want %s", got, want)
	}
	// Render replaces every "public.outbox"; a longer name starting with it
	// (public.outbox_default) would be mangled into invalid SQL.
	longer := regexp.MustCompile(`public\.outbox[A-Za-z0-9_]`)
	for _, m := range append(all, part...) {
		t.Run(m.Name, func(t *testing.T) {
			if loc := longer.FindStringIndex(m.SQL); loc != nil {
				t.Errorf("%s contains %q, which Render would mangle", m.Name, m.SQL[loc[0]:loc[1]+10])
			}
			r := m.Render(`"billing"."outbox"`)
			if strings.Contains(r, migrations.DefaultTable) {
				t.Errorf("rendered %s still contains %s", m.Name, migrations.DefaultTable)
			}
			if !strings.Contains(r, `"billing"."outbox"`) {
				t.Errorf("rendered %s does not name the table", m.Name)
			}
		})
	}
}

// testDB creates a database of its own for t (walrelay.emit and the
// partition functions exist once per database, and other packages' tests
// migrate concurrently) and returns its DSN. It is dropped, with its
// replication slots, when t ends. Without WALRELAY_TEST_PG_DSN the test
// fails in CI and is skipped elsewhere.
func testDB(t *testing.T) string {
	t.Helper()
	return pgtest.Database(t, "h5_migrations")
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryInt(t *testing.T, conn *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// apply runs each migration for quotedTable the way `walrelay migrate` does:
// one simple-protocol Exec per file.
func apply(t *testing.T, conn *pgx.Conn, quotedTable string, sets ...func() ([]migrations.Migration, error)) {
	t.Helper()
	for _, set := range sets {
		ms, err := set()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if _, err := conn.PgConn().Exec(context.Background(), m.Render(quotedTable)).ReadAll(); err != nil {
				t.Fatalf("apply %s: %v", m.Name, err)
			}
		}
	}
}

// emitted is a tableless outbox event as walrelay.emit writes it.
type emitted struct {
	ID            string         `json:"id"`
	AggregateType string         `json:"aggregate_type"`
	AggregateID   string         `json:"aggregate_id"`
	EventType     string         `json:"event_type"`
	Payload       map[string]any `json:"payload"`
	Headers       map[string]any `json:"headers"`
}

// slotMessages consumes the test_decoding slot and returns the contents of
// its logical messages with the prefix walrelay.outbox.
func slotMessages(t *testing.T, conn *pgx.Conn, slot string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL)", slot)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// test_decoding: "message: transactional: 1 prefix: walrelay.outbox, sz: 123 content:{...}"
	const head = "message: transactional: 1 prefix: walrelay.outbox, sz: "
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "message:") && !strings.HasPrefix(l, "message: transactional: 1 ") {
			t.Errorf("non-transactional message: %s", l)
		}
		if !strings.HasPrefix(l, head) {
			continue
		}
		_, content, ok := strings.Cut(l, " content:")
		if !ok {
			t.Fatalf("unexpected test_decoding line %q", l)
		}
		out = append(out, content)
	}
	return out
}

func TestEmit(t *testing.T) {
	dsn := testDB(t)
	conn := connect(t, dsn)
	ctx := context.Background()
	exec(t, conn, "CREATE SCHEMA h5_emit")
	// A custom table proves the substitution reaches the function body.
	apply(t, conn, `"h5_emit"."outbox"`, migrations.All, migrations.All)
	exec(t, conn, "SELECT pg_create_logical_replication_slot('h5_emit', 'test_decoding')")
	rowCount := func() int { return queryInt(t, conn, "SELECT count(*) FROM h5_emit.outbox") }

	t.Run("table mode", func(t *testing.T) {
		for _, mode := range []string{"", "table"} {
			exec(t, conn, "SELECT set_config('walrelay.emit_mode', $1, false)", mode)
			var id string
			if err := conn.QueryRow(ctx, `SELECT walrelay.emit('order', 'o-1', 'OrderCreated', '{"total": 9.5}', '{"traceparent": "tp"}')::text`).Scan(&id); err != nil {
				t.Fatalf("mode %q: %v", mode, err)
			}
			var aggType, aggID, evType, payload, headers string
			err := conn.QueryRow(ctx, "SELECT aggregate_type, aggregate_id, event_type, payload::text, headers::text FROM h5_emit.outbox WHERE id = $1::uuid", id).
				Scan(&aggType, &aggID, &evType, &payload, &headers)
			if err != nil {
				t.Fatalf("mode %q: row %s: %v", mode, id, err)
			}
			if aggType != "order" || aggID != "o-1" || evType != "OrderCreated" || payload != `{"total": 9.5}` || headers != `{"traceparent": "tp"}` {
				t.Errorf("mode %q: row = %s %s %s %s %s", mode, aggType, aggID, evType, payload, headers)
			}
		}
		// headers default to {}, a NULL payload stays NULL (a tombstone).
		var id, headers string
		var payload *string
		if err := conn.QueryRow(ctx, "SELECT walrelay.emit('order', 'o-2', 'OrderDeleted', NULL)::text").Scan(&id); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT headers::text, payload::text FROM h5_emit.outbox WHERE id = $1::uuid", id).Scan(&headers, &payload); err != nil {
			t.Fatal(err)
		}
		if headers != "{}" || payload != nil {
			t.Errorf("defaults: headers %s, payload %v", headers, payload)
		}
		if msgs := slotMessages(t, conn, "h5_emit"); len(msgs) != 0 {
			t.Errorf("table mode wrote logical messages: %v", msgs)
		}
	})

	t.Run("wal mode", func(t *testing.T) {
		exec(t, conn, "RESET walrelay.emit_mode")
		before := rowCount()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var id string
		if _, err := tx.Exec(ctx, "SET LOCAL walrelay.emit_mode = 'wal'"); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, `SELECT walrelay.emit('order', 'o-3', 'OrderPaid', '{"paid": true, "n": [1, 2]}', '{"traceparent": "tp3"}')::text`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if n := rowCount(); n != before {
			t.Errorf("wal mode inserted %d rows", n-before)
		}
		msgs := slotMessages(t, conn, "h5_emit")
		if len(msgs) != 1 {
			t.Fatalf("got %d walrelay.outbox messages, want 1: %v", len(msgs), msgs)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(msgs[0]), &raw); err != nil {
			t.Fatalf("message content %q is not a JSON object: %v", msgs[0], err)
		}
		if p := raw["payload"]; len(p) == 0 || p[0] != '{' {
			t.Errorf("payload is %s, want a JSON object (not a string)", p)
		}
		var ev emitted
		if err := json.Unmarshal([]byte(msgs[0]), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.ID != id || ev.AggregateType != "order" || ev.AggregateID != "o-3" || ev.EventType != "OrderPaid" ||
			ev.Payload["paid"] != true || ev.Headers["traceparent"] != "tp3" {
			t.Errorf("message %+v, want id %s and the emitted fields", ev, id)
		}
	})

	t.Run("wal mode rolled back", func(t *testing.T) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL walrelay.emit_mode = 'wal'"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT walrelay.emit('order', 'o-4', 'OrderLost', '{}')"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		exec(t, conn, "SELECT pg_logical_emit_message(true, 'h5.marker', 'after rollback')") // the slot has read past the rollback
		if msgs := slotMessages(t, conn, "h5_emit"); len(msgs) != 0 {
			t.Errorf("rolled-back emit reached the slot: %v", msgs)
		}
	})

	t.Run("database setting", func(t *testing.T) {
		db := conn.Config().Database
		exec(t, conn, "ALTER DATABASE "+db+" SET walrelay.emit_mode = 'wal'")
		defer exec(t, conn, "ALTER DATABASE "+db+" RESET walrelay.emit_mode")
		other := connect(t, dsn)
		before := rowCount()
		exec(t, other, "SELECT walrelay.emit('order', 'o-5', 'OrderShipped', '{}')")
		if n := rowCount(); n != before {
			t.Errorf("ALTER DATABASE ... 'wal': emit inserted %d rows", n-before)
		}
		if msgs := slotMessages(t, conn, "h5_emit"); len(msgs) != 1 {
			t.Errorf("ALTER DATABASE ... 'wal': got %d messages, want 1", len(msgs))
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			name, setup, call, code string
			want                    []string
		}{
			{"bad mode", "SET walrelay.emit_mode = 'kafka'", "SELECT walrelay.emit('a', 'b', 'c', '{}')",
				"22023", []string{"walrelay.emit_mode", "'kafka'", "'table'", "'wal'"}},
			{"null aggregate id", "RESET walrelay.emit_mode", "SELECT walrelay.emit('a', NULL, 'c', '{}')",
				"23502", []string{"aggregate_id"}},
			{"headers not an object", "RESET walrelay.emit_mode", `SELECT walrelay.emit('a', 'b', 'c', '{}', '["x"]')`,
				"22023", []string{"headers", "object"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				exec(t, conn, c.setup)
				_, err := conn.Exec(ctx, c.call)
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) {
					t.Fatalf("%s: err = %v, want a Postgres error", c.call, err)
				}
				text := pgErr.Message + " " + pgErr.Hint
				for _, w := range c.want {
					if !strings.Contains(text, w) {
						t.Errorf("error %q lacks %q", text, w)
					}
				}
				if pgErr.Code != c.code {
					t.Errorf("SQLSTATE %s, want %s", pgErr.Code, c.code)
				}
			})
		}
		exec(t, conn, "RESET walrelay.emit_mode")
	})

	t.Run("plain role", func(t *testing.T) {
		// Any role may call it (USAGE on the schema is granted to PUBLIC);
		// it runs with the caller's rights, and INSERT on the table is all
		// it needs, whatever the search_path.
		role := "h5_emit_role_" + strings.TrimPrefix(conn.Config().Database, "h5_migrations_")
		exec(t, conn, "CREATE ROLE "+role)
		t.Cleanup(func() {
			ctx := context.Background()
			_, _ = conn.Exec(ctx, "RESET ROLE")
			_, _ = conn.Exec(ctx, "DROP OWNED BY "+role)
			_, _ = conn.Exec(ctx, "DROP ROLE "+role)
		})
		exec(t, conn, "GRANT USAGE ON SCHEMA h5_emit TO "+role)
		exec(t, conn, "SET ROLE "+role)
		exec(t, conn, "SET search_path = ''")
		_, err := conn.Exec(ctx, "SELECT walrelay.emit('a', 'b', 'c', '{}')")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("without INSERT on the table: err = %v, want insufficient_privilege", err)
		}
		exec(t, conn, "RESET ROLE")
		exec(t, conn, "GRANT INSERT ON h5_emit.outbox TO "+role)
		exec(t, conn, "SET ROLE "+role)
		exec(t, conn, "SELECT walrelay.emit('a', 'b', 'c', '{}')")
		exec(t, conn, "RESET ROLE")
		exec(t, conn, "RESET search_path")
	})
}

func TestPartitioned(t *testing.T) {
	dsn := testDB(t)
	conn := connect(t, dsn)
	exec(t, conn, "CREATE SCHEMA h5_part")
	// Twice: the files are idempotent, and All leaves the partitioned table be.
	apply(t, conn, `"h5_part"."outbox"`, migrations.Partitioned, migrations.All, migrations.Partitioned, migrations.All)

	if kind := queryString(t, conn, "SELECT relkind::text FROM pg_class WHERE oid = 'h5_part.outbox'::regclass"); kind != "p" {
		t.Fatalf("relkind %s, want p (partitioned)", kind)
	}
	if pk := queryString(t, conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'h5_part.outbox'::regclass AND contype = 'p'"); pk != "PRIMARY KEY (id, created_at)" {
		t.Errorf("primary key %s", pk)
	}
	partitions := func() []string {
		rows, err := conn.Query(context.Background(), "SELECT relid::regclass::text FROM pg_partition_tree('h5_part.outbox') WHERE isleaf ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	day := func(offset int) string { return time.Now().UTC().AddDate(0, 0, offset).Format("20060102") }
	want := []string{"h5_part.outbox_default"}
	for i := 0; i <= 3; i++ {
		want = append(want, "h5_part.outbox_p"+day(i))
	}
	slices.Sort(want)
	if got := partitions(); !slices.Equal(got, want) {
		t.Fatalf("partitions after migrate: %v, want %v", got, want)
	}

	// A row for day +10 sits in the default partition: that day is skipped,
	// the others are created.
	exec(t, conn, "INSERT INTO h5_part.outbox (aggregate_type, aggregate_id, event_type, created_at) VALUES ('a', 'future', 'e', now() + interval '10 days')")
	if n := queryInt(t, conn, "SELECT walrelay.outbox_create_partitions(11)"); n != 7 {
		t.Errorf("outbox_create_partitions(11) created %d, want 7 (days 4..9 and 11)", n)
	}
	if n := queryInt(t, conn, "SELECT walrelay.outbox_create_partitions(11)"); n != 0 {
		t.Errorf("outbox_create_partitions again created %d, want 0", n)
	}
	got := strings.Join(partitions(), " ")
	if strings.Contains(got, "outbox_p"+day(10)) || !strings.Contains(got, "outbox_p"+day(11)) {
		t.Errorf("partitions %s: want day +11 and not day +10", got)
	}

	// Old daily partitions, made by hand as outbox_create_partitions only
	// looks ahead, plus one that does not follow the naming.
	for _, off := range []int{-10, -5, -1} {
		exec(t, conn, "CREATE TABLE h5_part.outbox_p"+day(off)+" PARTITION OF h5_part.outbox FOR VALUES FROM ($$"+
			dayStart(off)+"$$) TO ($$"+dayStart(off+1)+"$$)")
	}
	exec(t, conn, "CREATE TABLE h5_part.outbox_archive PARTITION OF h5_part.outbox FOR VALUES FROM ($$"+dayStart(-30)+"$$) TO ($$"+dayStart(-20)+"$$)")
	for _, off := range []int{-25, -10, -10, -5, -1, 0} {
		exec(t, conn, "INSERT INTO h5_part.outbox (aggregate_type, aggregate_id, event_type, created_at) VALUES ('a', 'b', 'e', $1::timestamptz + interval '1 hour')", dayStart(off))
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM walrelay.outbox_expired_partitions('3 days')"); n != 2 {
		t.Errorf("expired partitions: %d, want 2", n)
	}
	if n := queryInt(t, conn, "SELECT walrelay.outbox_drop_partitions('3 days')"); n != 2 {
		t.Errorf("outbox_drop_partitions('3 days') dropped %d, want 2 (days -10 and -5)", n)
	}
	got = strings.Join(partitions(), " ")
	for _, gone := range []int{-10, -5} {
		if strings.Contains(got, "outbox_p"+day(gone)) {
			t.Errorf("partition of day %d survived: %s", gone, got)
		}
	}
	for _, kept := range []string{"outbox_p" + day(-1), "outbox_archive", "outbox_default"} {
		if !strings.Contains(got, kept) {
			t.Errorf("partition %s dropped: %s", kept, got)
		}
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM h5_part.outbox"); n != 4 {
		t.Errorf("%d rows left, want 4 (days -25, -1, 0, +10)", n)
	}
	if n := queryInt(t, conn, "SELECT walrelay.outbox_drop_partitions('3 days', 'h5_part.outbox')"); n != 0 {
		t.Errorf("second drop dropped %d", n)
	}
	// The table can be dropped without CASCADE: the functions do not pin it.
	exec(t, conn, "DROP TABLE h5_part.outbox")
	_, err := conn.Exec(context.Background(), "SELECT walrelay.outbox_create_partitions()")
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("create partitions of a dropped table: err = %v", err)
	}
}

// TestPublishViaPartitionRoot confirms that pgoutput publishes inserts into a
// partitioned outbox under the partitioned table's name only when the
// publication has publish_via_partition_root = true.
func TestPublishViaPartitionRoot(t *testing.T) {
	dsn := testDB(t)
	conn := connect(t, dsn)
	exec(t, conn, "CREATE SCHEMA h5_pub")
	apply(t, conn, `"h5_pub"."outbox"`, migrations.Partitioned, migrations.All)
	exec(t, conn, "CREATE PUBLICATION h5_root FOR TABLE h5_pub.outbox WITH (publish = 'insert', publish_via_partition_root = true)")
	exec(t, conn, "CREATE PUBLICATION h5_leaf FOR TABLE h5_pub.outbox WITH (publish = 'insert')")
	exec(t, conn, "SELECT pg_create_logical_replication_slot('h5_pub', 'pgoutput')")
	exec(t, conn, "SELECT walrelay.emit('order', 'o-1', 'OrderCreated', '{}')")
	leaf := "outbox_p" + time.Now().UTC().Format("20060102")
	if queryInt(t, conn, "SELECT count(*) FROM h5_pub."+leaf) != 1 {
		t.Fatalf("the row is not in partition %s", leaf)
	}

	// published returns the relations the slot's inserts are published
	// under for publication pub (peeking, so the slot keeps them).
	published := func(pub string) []string {
		rows, err := conn.Query(context.Background(),
			"SELECT data FROM pg_logical_slot_peek_binary_changes('h5_pub', NULL, NULL, 'proto_version', '1', 'publication_names', $1)", pub)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		if err != nil {
			t.Fatal(err)
		}
		rels := map[uint32]string{}
		var inserts []string
		for _, b := range msgs {
			m, err := pglogrepl.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			switch m := m.(type) {
			case *pglogrepl.RelationMessage:
				rels[m.RelationID] = m.Namespace + "." + m.RelationName
			case *pglogrepl.InsertMessage:
				inserts = append(inserts, rels[m.RelationID])
			}
		}
		return inserts
	}
	for _, c := range []struct{ pub, want string }{{"h5_root", "outbox"}, {"h5_leaf", leaf}} {
		if got := published(c.pub); len(got) != 1 || got[0] != "h5_pub."+c.want {
			t.Errorf("publication %s: inserts published under %v, want [h5_pub.%s]", c.pub, got, c.want)
		}
	}
	// Dropping the partition before walrelay read it loses no event: the
	// insert is decoded from the WAL with the catalog of its time.
	if n := queryInt(t, conn, "SELECT walrelay.outbox_drop_partitions('-2 days')"); n < 1 {
		t.Fatalf("dropped %d partitions, want today's among them", n)
	}
	if got := published("h5_root"); len(got) != 1 || got[0] != "h5_pub.outbox" {
		t.Errorf("after dropping the partition: inserts published under %v, want [h5_pub.outbox]", got)
	}
}

func queryString(t *testing.T, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// dayStart is the start of the UTC day offset days from today, as a
// timestamptz literal.
func dayStart(offset int) string {
	return time.Now().UTC().AddDate(0, 0, offset).Format("2006-01-02") + " 00:00:00+00"
}

// TestTimeColumnAddedToDebeziumTable: migrating Debezium's documented outbox table
// (no created_at) adds the time column the safety net selects by, NOT NULL, with the
// rows already there given the time of the change; migrating again changes nothing.
func TestTimeColumnAddedToDebeziumTable(t *testing.T) {
	conn := connect(t, testDB(t))
	exec(t, conn, `CREATE TABLE public.dbz_outbox (
		id            uuid         PRIMARY KEY,
		aggregatetype varchar(255) NOT NULL,
		aggregateid   varchar(255) NOT NULL,
		type          varchar(255) NOT NULL,
		payload       jsonb)`)
	exec(t, conn, `INSERT INTO public.dbz_outbox VALUES (gen_random_uuid(), 'order', 'o-1', 'OrderCreated', '{}')`)
	before := queryInt(t, conn, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.dbz_outbox'::regclass AND attnum > 0 AND NOT attisdropped`)
	apply(t, conn, `"public"."dbz_outbox"`, migrations.All)
	if n := queryInt(t, conn, `SELECT count(*) FROM public.dbz_outbox WHERE created_at IS NOT NULL AND created_at <= now()`); n != 1 {
		t.Errorf("rows with a created_at after migrate: %d, want 1", n)
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.dbz_outbox'::regclass AND attname = 'created_at'
		AND attnotnull AND atttypid = 'timestamptz'::regtype`); n != 1 {
		t.Errorf("created_at timestamptz NOT NULL columns: %d, want 1", n)
	}
	// Debezium's writers insert without the column.
	exec(t, conn, `INSERT INTO public.dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'order', 'o-2', 'OrderPaid', '{}')`)
	apply(t, conn, `"public"."dbz_outbox"`, migrations.All)
	if after := queryInt(t, conn, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.dbz_outbox'::regclass AND attnum > 0 AND NOT attisdropped`); after != before+1 {
		t.Errorf("columns after migrating twice: %d, want %d", after, before+1)
	}
}
