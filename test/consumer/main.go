// Command consumer is the consumer side of the transactional outbox: it reads the records
// walrelay produced and applies each event exactly once to its own database.
//
// walrelay delivers at least once: after a crash, records are sent again. Kafka offsets
// alone cannot make processing exactly once either, because the consumer may crash
// between its database commit and its offset commit. So the consumer remembers the ids
// of the events it processed in the same database transaction as their effects:
//
//	BEGIN;
//	INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING;
//	-- one row inserted: apply the event (here: a row in applied_events)
//	-- no row inserted:  a duplicate, already applied; do nothing
//	COMMIT;
//	-- then commit the Kafka offset
//
// A redelivered record then finds its id in processed_events and changes nothing.
//
// Usage:
//
//	consumer -brokers localhost:9092 -topic outbox.event.order -group billing \
//	         -dsn postgres://billing@db/billing -consumer billing
//
// -exit-after N stops after N applied events and -idle-timeout after a quiet period;
// both are for tests and demos. On exit it prints "applied=N duplicates=M".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// schema creates the consumer's two tables. processed_events makes processing idempotent;
// applied_events stands for the real effect of an event (a balance update, an email
// queued, ...) and deliberately has no unique constraint on event_id: only
// processed_events keeps an event from being applied twice.
const schema = `
CREATE TABLE IF NOT EXISTS processed_events (
  consumer     text        NOT NULL,
  event_id     text        NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, event_id)
);
CREATE TABLE IF NOT EXISTS applied_events (
  seq          bigserial   PRIMARY KEY,
  event_id     text        NOT NULL,
  aggregate_id text        NOT NULL,
  payload      jsonb,
  applied_at   timestamptz NOT NULL DEFAULT now()
);`

func main() {
	brokers := flag.String("brokers", "localhost:9092", "Kafka seed brokers, comma-separated")
	topic := flag.String("topic", "", "topic to consume (required)")
	group := flag.String("group", "", "consumer group (required)")
	dsn := flag.String("dsn", "", "the consumer's own Postgres database (required)")
	consumer := flag.String("consumer", "demo", "name of this consumer in processed_events")
	exitAfter := flag.Int("exit-after", 0, "exit after this many applied events (0: never)")
	idle := flag.Duration("idle-timeout", 0, "exit when no record arrives for this long (0: never)")
	flag.Parse()
	if *topic == "" || *group == "" || *dsn == "" {
		flag.Usage()
		os.Exit(2)
	}
	log.SetFlags(0)
	log.SetPrefix("consumer: ")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	db, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		log.Fatalf("connect to the database: %v", err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, schema); err != nil {
		log.Fatalf("create tables: %v", err)
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Offsets are committed by hand, after the database transaction committed.
		kgo.DisableAutoCommit(),
		// Skip aborted records when walrelay runs in exactly-once mode.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		log.Fatalf("kafka client: %v", err)
	}
	defer cl.Close() // leaves the group

	var applied, duplicates int
	defer func() { fmt.Printf("applied=%d duplicates=%d\n", applied, duplicates) }()

	for {
		fetches := poll(ctx, cl, *idle)
		if ctx.Err() != nil {
			return // interrupted
		}
		if errors.Is(fetches.Err0(), context.DeadlineExceeded) {
			return // no record for -idle-timeout
		}
		fetches.EachError(func(t string, p int32, err error) { log.Printf("fetch %s/%d: %v", t, p, err) })

		var done []*kgo.Record
		for _, rec := range fetches.Records() {
			ok, err := handle(ctx, db, *consumer, rec)
			if err != nil {
				// rec and what follows are not committed: they are read again after a restart.
				commit(ctx, cl, done)
				if ctx.Err() != nil {
					return
				}
				log.Fatalf("record %s/%d@%d: %v", rec.Topic, rec.Partition, rec.Offset, err)
			}
			done = append(done, rec)
			if ok {
				applied++
			} else {
				duplicates++
			}
			if *exitAfter > 0 && applied >= *exitAfter {
				commit(ctx, cl, done)
				return
			}
		}
		commit(ctx, cl, done)
	}
}

// poll waits for the next records; with idle > 0, for at most idle.
func poll(ctx context.Context, cl *kgo.Client, idle time.Duration) kgo.Fetches {
	if idle > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, idle)
		defer cancel()
	}
	return cl.PollFetches(ctx)
}

// handle processes one record in one database transaction. It returns false for a
// duplicate: an event this consumer already applied.
func handle(ctx context.Context, db *pgx.Conn, consumer string, rec *kgo.Record) (applied bool, err error) {
	id := header(rec, "id")
	if id == "" {
		return false, errors.New("no id header: cannot deduplicate")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx) // no-op after Commit

	tag, err := tx.Exec(ctx,
		`INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		consumer, id)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 1 {
		if err := apply(ctx, tx, id, rec); err != nil {
			return false, err
		}
		applied = true
	}
	return applied, tx.Commit(ctx)
}

// apply is the effect of an event. For the demo it records the event; payloads are
// expected to be JSON, and a null value (a tombstone) is stored as a NULL payload.
func apply(ctx context.Context, tx pgx.Tx, id string, rec *kgo.Record) error {
	var payload *string
	if rec.Value != nil {
		s := string(rec.Value)
		payload = &s
	}
	_, err := tx.Exec(ctx,
		`INSERT INTO applied_events (event_id, aggregate_id, payload) VALUES ($1, $2, $3::jsonb)`,
		id, string(rec.Key), payload)
	return err
}

// commit commits the offsets of records whose transactions committed.
func commit(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := cl.CommitRecords(ctx, recs...); err != nil {
		// Not fatal for correctness: the records are read again and skipped as duplicates.
		log.Printf("commit offsets: %v", err)
	}
}

func header(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
