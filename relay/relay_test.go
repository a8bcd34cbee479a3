package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/relaytest"
)

// relayFixture is an outbox table and Run streaming it into kfake.
type relayFixture struct{ *relaytest.Fixture }

func startRelay(t *testing.T, name string, cluster *kfake.Cluster, mods ...func(*Options)) *relayFixture {
	t.Helper()
	return startRelayWith(t, name, cluster, relaytest.CreateOutbox, mods...)
}

// startRelayWith is startRelay with the outbox table made by create (dsn,
// schema.name).
func startRelayWith(t *testing.T, name string, cluster *kfake.Cluster, create func(t *testing.T, dsn, table string), mods ...func(*Options)) *relayFixture {
	t.Helper()
	return &relayFixture{relaytest.Start(t, name, cluster, create, func(dsn string, log *slog.Logger) func(context.Context) error {
		opts := testOptions(dsn, cluster.ListenAddrs(), name)
		opts.Logger = log // first: a mod may log
		for _, mod := range mods {
			mod(&opts)
		}
		return func(ctx context.Context) error { return Run(ctx, opts) }
	})}
}

// TestAckDisciplineKfake holds every produce request in kfake and shows that
// the slot's confirmed_flush_lsn does not pass the held records; once Kafka
// answers, it advances to (at least) the end of the last transaction.
func TestAckDisciplineKfake(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	release := make(chan struct{})
	var held atomic.Int32
	marks := slotMarks(t, cluster)
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if marks(req) {
			return nil, nil, false
		}
		select {
		case <-release:
		default:
			held.Add(1)
			cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false // then let kfake handle it normally
	})

	f := startRelay(t, "relay_ack", cluster)
	pg := f.PG
	// Caught up before the writes: the idle stream confirms the WAL end.
	start := pg.InsertLSN()
	testwait.Eventually(t, 15*time.Second, "the idle slot to reach the WAL end", func() bool { return pg.Confirmed(f.Name) >= start })
	before := pg.Confirmed(f.Name)

	for i := 0; i < 5; i++ {
		f.InsertTxn(t, fmt.Sprintf("agg-%d", i%2), 3)
	}
	after := pg.InsertLSN()
	testwait.Eventually(t, 15*time.Second, "a produce request to be held", func() bool { return held.Load() > 0 })

	// While Kafka has acknowledged nothing, the slot must not move past the
	// first transaction's first insert (nothing else writes WAL here; the
	// transaction ends after it, so reaching the insert position is allowed).
	var maxSeen pglogrepl.LSN
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if c := pg.Confirmed(f.Name); c > maxSeen {
			maxSeen = c
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(release)

	recs := relaytest.ConsumeAll(t, cluster.ListenAddrs(), f.Name+".order", 15)
	firstInsert := pglogrepl.LSN(1<<64 - 1)
	for _, r := range recs {
		l, err := pglogrepl.ParseLSN(relaytest.HeaderValue(r, sink.HeaderLSN))
		if err != nil {
			t.Fatalf("record without a valid %s header: %v", sink.HeaderLSN, err)
		}
		firstInsert = min(firstInsert, l)
	}
	if maxSeen > firstInsert {
		t.Fatalf("confirmed_flush_lsn reached %v while the records starting at %v were unacknowledged (before writes: %v)", maxSeen, firstInsert, before)
	}
	testwait.Eventually(t, 15*time.Second, fmt.Sprintf("confirmed_flush_lsn to reach %v after Kafka acknowledged", after), func() bool {
		return pg.Confirmed(f.Name) >= after
	})
	t.Logf("held %d produce requests; confirmed stayed at %v (<= first insert %v) while held, reached %v after (last commit %v)",
		held.Load(), maxSeen, firstInsert, pg.Confirmed(f.Name), after)
}

// TestPermanentProduceErrorStops makes Kafka refuse records for good: the
// relay must stop with an error naming the event, and the slot must not pass
// the refused transaction.
func TestPermanentProduceErrorStops(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxInFlight int
		events      int
	}{
		{"below the cap", 10000, 2},
		// Every unit held by a failed record: the reader is blocked at the
		// cap when the failures arrive and must still stop.
		{"blocked at the cap", 3, 20},
	} {
		t.Run(tc.name, func(t *testing.T) { permanentProduceErrorStops(t, tc.maxInFlight, tc.events) })
	}
}

func permanentProduceErrorStops(t *testing.T, maxInFlight, events int) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	marks := slotMarks(t, cluster)
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if marks(req) {
			return nil, nil, false
		}
		return produceErrorResponse(req.(*kmsg.ProduceRequest), kerr.InvalidRecord.Code), nil, true
	})
	f := startRelay(t, "relay_poison", cluster, func(o *Options) { o.MaxInFlight, o.Sink.MaxBufferedRecords = maxInFlight, maxInFlight })
	pg := f.PG
	start := pg.InsertLSN()
	testwait.Eventually(t, 15*time.Second, "the idle slot to reach the WAL end", func() bool { return pg.Confirmed(f.Name) >= start })
	f.InsertTxn(t, "agg-x", events)
	var runErr error
	select {
	case runErr = <-f.Done:
	case <-time.After(30 * time.Second):
		t.Fatal("relay kept running after Kafka refused a record for good")
	}
	if runErr == nil || !errors.Is(runErr, kerr.InvalidRecord) || !strings.Contains(runErr.Error(), "event id=") {
		t.Fatalf("relay returned %v; want an error naming the event and wrapping INVALID_RECORD", runErr)
	}
	f.Done <- runErr // for the cleanup's stop
	// The refused transaction must still be ahead of the slot: a restart
	// reads it again. (The confirmed position itself may pass start: WAL is
	// cluster-wide, and a keepalive's WAL end from before the transaction's
	// commit is a safe position to confirm.) Only this test writes to the
	// outbox of its own database, so every insert still in the slot is one
	// of the refused transaction's.
	testwait.Eventually(t, 15*time.Second, "the walsender to release the slot", func() bool {
		return pg.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", f.Name) == 1
	})
	if n := pg.Count(`SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2) WHERE substr(data, 1, 1) = 'I'::bytea`, f.Name, f.Name); n != events {
		t.Fatalf("the slot still holds %d inserts of the refused transaction, want %d: it was confirmed past it (confirmed %v, start %v)",
			n, events, pg.Confirmed(f.Name), start)
	}
}

func produceErrorResponse(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// slotMarks creates the checkpoint topic in cluster and returns whether a
// produce request goes only to it: walrelay's mark of the slot it creates
// at start, which the tests that hold or refuse the events' produce
// requests let through. (A produce request of v13 names topics by id.)
func slotMarks(t *testing.T, cluster *kfake.Cluster) func(kmsg.Request) bool {
	t.Helper()
	if err := cluster.CreateTopic(sink.DefaultCheckpointTopic, 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	id := cluster.TopicInfo(sink.DefaultCheckpointTopic).TopicID
	return func(req kmsg.Request) bool {
		p, ok := req.(*kmsg.ProduceRequest)
		if !ok || len(p.Topics) == 0 {
			return false
		}
		for _, pt := range p.Topics {
			if pt.Topic != sink.DefaultCheckpointTopic && pt.TopicID != id {
				return false
			}
		}
		return true
	}
}
