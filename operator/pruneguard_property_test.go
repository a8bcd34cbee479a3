package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/pgtest"
	"github.com/walrelay/walrelay/test/relaytest"
)

// The prune guard's property: whatever the order of slot creation, writes,
// walrelay streaming, slot loss, recoveries (finished or interrupted right
// after making their slot) and prunes, over two databases of one cluster
// in their own time zones, prune never deletes a row whose event is not
// in Kafka. The test drives the real Postgres and the real tools; only
// walrelay run is played by the model (it delivers what its slot holds and
// confirms it).

// guardDB is one database of the model: an outbox (created_at a timestamp
// without time zone holding UTC wall time), its slot name, and which of
// its rows' events Kafka holds.
type guardDB struct {
	name string // table <name>_outbox, slot <name>, topics <name>.{aggregate_type}
	zone string // the database's TimeZone
	pg   *pgtest.Conn
	opts relay.Options
	// seq numbers the rows in commit order; streamFrom is the seq from
	// which the slot (or the recovery's, once handed over) holds rows.
	seq        int
	streamFrom int
	rows       map[string]guardRow // by id, rows still in the table or deleted
	delivered  map[string]bool
}

type guardRow struct {
	seq int
	at  time.Time // created_at (UTC), the virtual commit time
}

// guardModel is one run of the property.
type guardModel struct {
	t        *testing.T
	rng      *rand.Rand
	cluster  *kfake.Cluster
	producer *kgo.Client
	dbs      []*guardDB
	now      time.Time     // the server's clock at the start
	clock    time.Duration // virtual time, before now: rows are written at now+clock
	log      []string
}

func (m *guardModel) step(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

func (m *guardModel) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s\nsteps:\n  %s", fmt.Sprintf(format, args...), strings.Join(m.log, "\n  "))
}

// slotExists reports whether db's slot exists in its database and is valid.
func (d *guardDB) slotExists() bool {
	return d.pg.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database() AND wal_status IS DISTINCT FROM 'lost'",
		d.opts.Replication.Slot) == 1
}

// write commits n rows at the virtual clock.
func (m *guardModel) write(d *guardDB, n int) {
	at := m.now.Add(m.clock).UTC()
	rows, err := d.pg.Conn.Query(context.Background(), `INSERT INTO public.`+d.name+`_outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT 'order', 'a', 'e', '{}', $1::timestamptz AT TIME ZONE 'UTC' FROM generate_series(1, $2) RETURNING id::text`, at, n)
	if err != nil {
		m.fail("write: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		m.fail("write: %v", err)
	}
	for _, id := range ids {
		d.seq++
		d.rows[id] = guardRow{seq: d.seq, at: at}
	}
	m.step("%s: write %d rows at %s", d.name, n, m.clock)
}

// stream plays walrelay run: with its slot in place, every row the slot
// holds goes to Kafka (commit time = created_at), and the slot confirms it.
func (m *guardModel) stream(d *guardDB) {
	if !d.slotExists() {
		m.step("%s: run refuses (slot missing)", d.name)
		return
	}
	var recs []*kgo.Record
	for id, r := range d.rows {
		if r.seq > d.streamFrom && !d.delivered[id] {
			recs = append(recs, &kgo.Record{Topic: d.name + ".order", Key: []byte("a"), Value: []byte("{}"), Timestamp: r.at,
				Headers: []kgo.RecordHeader{{Key: sink.HeaderID, Value: []byte(id)}, {Key: sink.HeaderLSN, Value: []byte("0/1")}}})
		}
	}
	if len(recs) > 0 {
		if err := m.producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			m.fail("produce: %v", err)
		}
	}
	for _, r := range recs {
		d.delivered[string(r.Headers[0].Value)] = true
	}
	d.pg.Exec("CHECKPOINT")
	d.pg.Exec("SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", d.opts.Replication.Slot)
	m.step("%s: run streams %d events", d.name, len(recs))
}

// lose drops db's slot while walrelay is down.
func (m *guardModel) lose(d *guardDB) {
	if !d.slotExists() {
		return
	}
	d.pg.Exec("SELECT pg_drop_replication_slot($1)", d.opts.Replication.Slot)
	m.step("%s: slot dropped", d.name)
}

// recover runs walrelay replay --since-last-delivered, interrupted right
// after making its slot or to the end.
func (m *guardModel) recover(d *guardDB, interrupt bool) {
	ctx := context.Background()
	ropts := recovery(d.opts, 10*time.Minute)
	rec, created, err := guardStartRecovery(ctx, ropts)
	var inUse *SlotInUseError
	if errors.As(err, &inUse) {
		m.step("%s: recovery refused (slot in use)", d.name)
		return
	}
	if err != nil {
		m.fail("%s: start the recovery: %v", d.name, err)
	}
	if created {
		d.streamFrom = d.seq
	}
	if interrupt {
		m.step("%s: recovery since %s interrupted after its slot (created %v)", d.name, rec.Since.Sub(m.now), created)
		return
	}
	// The rows the replay's snapshot selects.
	replayed := map[string]bool{}
	for id, r := range d.rows {
		if !r.at.Before(rec.Since) && d.pg.Count("SELECT count(*) FROM public."+d.name+"_outbox WHERE id = $1::uuid", id) == 1 {
			replayed[id] = true
		}
	}
	res, err := replay(ctx, d.opts, ReplayOptions{Selection: ReplaySelection{Since: rec.Since}})
	var nothing *NothingToReplayError
	if err != nil && !errors.As(err, &nothing) {
		m.fail("%s: replay: %v", d.name, err)
	}
	if err == nil && res.Acked != int64(len(replayed)) {
		m.fail("%s: replay acknowledged %d rows, the model expected %d", d.name, res.Acked, len(replayed))
	}
	for id := range replayed {
		d.delivered[id] = true
	}
	if err := guardFinishRecovery(ctx, &rec, ropts); err != nil {
		m.fail("%s: hand over: %v", d.name, err)
	}
	m.step("%s: recovery since %s replayed %d rows", d.name, rec.Since.Sub(m.now), len(replayed))
}

// prune runs prune --older-than 1h on db naming slot, and checks the
// property.
func (m *guardModel) prune(d *guardDB, slot string) {
	dl := delivered(d.opts)
	res, err := Prune(context.Background(), PruneOptions{DSN: d.opts.Replication.DSN, Table: "public." + d.name + "_outbox", OlderThan: time.Hour,
		BatchSize: 1000, TimeColumn: "created_at", Slot: slot, Delivered: &dl, RecoveryMargin: 10 * time.Minute}, slog.New(slog.DiscardHandler))
	if err != nil {
		m.fail("%s: prune: %v", d.name, err)
	}
	m.step("%s: prune --slot %s deleted %d rows", d.name, slot, res.Rows)
	left := map[string]bool{}
	rows, err := d.pg.Conn.Query(context.Background(), "SELECT id::text FROM public."+d.name+"_outbox")
	if err != nil {
		m.fail("read rows: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		m.fail("read rows: %v", err)
	}
	for _, id := range ids {
		left[id] = true
	}
	for id, r := range d.rows {
		if !left[id] && !d.delivered[id] {
			m.fail("%s (TimeZone %s): prune --slot %s deleted row %s (created %s, seq %d) whose event Kafka does not hold; it said: %s",
				d.name, d.zone, slot, id, r.at.Sub(m.now), r.seq, res.KeptWhy)
		}
	}
}

// TestPruneGuardProperty runs random interleavings (seeds 1..8, each
// reproducible) and checks after every prune that no row whose event Kafka
// lacks was deleted.
func TestPruneGuardProperty(t *testing.T) {
	zones := []string{"UTC", "Asia/Tokyo", "America/Los_Angeles"}
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.AllowAutoTopicCreation())
			if err != nil {
				t.Fatal(err)
			}
			defer producer.Close()
			m := &guardModel{t: t, rng: rand.New(rand.NewPCG(seed, 27)), cluster: cluster, producer: producer, clock: -12 * time.Hour}
			for i, name := range []string{"ga", "gb"} {
				dsn, pg := relaytest.Database(t)
				relaytest.CreateOutbox(t, dsn, "public."+name+"_outbox")
				utcWallTable(pg, "public."+name+"_outbox")
				d := &guardDB{name: name, zone: zones[m.rng.IntN(len(zones))], pg: pg, rows: map[string]guardRow{}, delivered: map[string]bool{}}
				if i == 0 || m.rng.IntN(2) == 0 {
					d.zone = "Asia/Tokyo" // at least one database east of UTC
				}
				pg.Exec(fmt.Sprintf("ALTER DATABASE %s SET timezone = '%s'", pgx.Identifier{dbName(t, pg)}.Sanitize(), d.zone))
				d.opts = testOptions(dsn, cluster.ListenAddrs(), name)
				d.opts.Logger = slog.New(slog.DiscardHandler)
				// walrelay's first start, before the first row.
				pg.Exec("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name)
				m.dbs = append(m.dbs, d)
				m.step("%s: TimeZone %s, slot created", name, d.zone)
			}
			m.now = serverNow(t, m.dbs[0].pg)
			for range 30 {
				d := m.dbs[m.rng.IntN(len(m.dbs))]
				switch op := m.rng.IntN(100); {
				case op < 35:
					m.clock = min(m.clock+time.Duration(5+m.rng.IntN(50))*time.Minute, 0)
					m.write(d, 1+m.rng.IntN(3))
				case op < 55:
					m.stream(d)
				case op < 63:
					m.lose(d)
				case op < 75:
					m.recover(d, m.rng.IntN(2) == 0)
				default:
					slot := d.opts.Replication.Slot
					if m.rng.IntN(3) == 0 { // the other database's slot (--slot left at a shared default)
						slot = m.dbs[(indexOf(m.dbs, d)+1)%len(m.dbs)].opts.Replication.Slot
					}
					m.prune(d, slot)
				}
			}
			for _, d := range m.dbs {
				m.prune(d, d.opts.Replication.Slot)
			}
			pruned := 0
			for _, l := range m.log {
				if strings.Contains(l, "prune") && !strings.Contains(l, "deleted 0 rows") {
					pruned++
				}
			}
			t.Logf("%d steps, %d prunes deleted rows, none Kafka lacks", len(m.log), pruned)
		})
	}
}

func indexOf(dbs []*guardDB, d *guardDB) int {
	for i, x := range dbs {
		if x == d {
			return i
		}
	}
	return -1
}

func dbName(t *testing.T, pg *pgtest.Conn) string {
	t.Helper()
	var db string
	if err := pg.Conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	return db
}

// guardStartRecovery plans a recovery and makes (or keeps) its slot;
// created reports a new slot.
func guardStartRecovery(ctx context.Context, ropts RecoveryOptions) (rec Recovery, created bool, err error) {
	if rec, err = PlanRecovery(ctx, ropts); err != nil {
		return rec, false, err
	}
	reused, err := rec.CreateSlot(ctx, ropts)
	return rec, !reused, err
}

// guardFinishRecovery hands a finished recovery's slot over.
func guardFinishRecovery(ctx context.Context, rec *Recovery, ropts RecoveryOptions) error {
	return rec.HandOver(ctx, ropts)
}
