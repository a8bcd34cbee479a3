package operator

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/pgtest"
	"github.com/walrelay/walrelay/test/relaytest"
)

// TestRedriveStoredShape: a dead letter whose row is gone is sent only when
// its stored payload makes the very record run would have sent. A table
// that places columns in the value's envelope, or whose partition column
// chose the partition, needs the row's values the dead letter does not
// keep: the redrive (and its dry run) dead-letters it again and says why.
// A table whose value is the expanded JSON payload alone gets that value
// from the stored payload, as run wrote it.
func TestRedriveStoredShape(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create func(t *testing.T, dsn, table string)
		cols   func(*decoder.Columns)
		value  sink.JSONValue
		values bool   // the table has a sink.JSONValue
		cause  string // in the cause of the new dead letter; "" when sent
	}{
		{name: "envelope", cols: func(c *decoder.Columns) {
			c.Envelope = []decoder.EnvelopeColumn{{Column: "aggregate_id", Name: "aggId"}}
		},
			values: true, cause: "envelope"},
		{name: "envelope_expanded", cols: func(c *decoder.Columns) { c.Envelope = []decoder.EnvelopeColumn{{Column: "aggregate_id"}} },
			value: sink.JSONValue{ExpandPayload: true}, values: true, cause: "envelope"},
		{name: "partition", create: func(t *testing.T, dsn, table string) {
			relaytest.CreateOutbox(t, dsn, table)
			pgtest.Connect(t, dsn).Exec("ALTER TABLE " + table + " ADD COLUMN part integer DEFAULT 0")
		}, cols: func(c *decoder.Columns) { c.Partition = "part" }, cause: "partition column part"},
		{name: "expanded", value: sink.JSONValue{ExpandPayload: true}, values: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			allow := refuseTopics(cluster, ".refused")
			name := "redrive_shape_" + tc.name
			create := tc.create
			if create == nil {
				create = relaytest.CreateOutbox
			}
			f := newReplayFixtureOn(t, name, cluster, create, func(o *relay.Options) {
				o.Sink.Topic = name + ".{event_type}"
				table := o.Decoder.Tables[0].Schema + "." + o.Decoder.Tables[0].Name
				if tc.cols != nil {
					tc.cols(&o.Decoder.Tables[0].Columns)
					o.Replication.Columns = map[string][]string{table: o.Decoder.Tables[0].Columns.Mapped()}
				}
				if tc.values {
					o.Sink.JSONValues = map[string]sink.JSONValue{table: tc.value}
				}
			})
			ctx := context.Background()
			// Null fields are left out of an expanded payload: run's value
			// differs from the payload as stored.
			payload := `'{"n": 1, "gone": null}'`
			f.txn(t, [4]string{"a", "ok", payload, `'{}'`})
			gone := f.txn(t, [4]string{"a", "refused", payload, `'{}'`})[0]
			ran := relaytest.ConsumeAll(t, cluster.ListenAddrs(), name+".ok", 1)[0]
			relaytest.ConsumeAll(t, cluster.ListenAddrs(), sink.DefaultDLQTopic, 1)
			allow()
			f.PG.Exec("DELETE FROM "+f.table+" WHERE id = $1", gone)

			var listed []RedriveItem
			dry, err := redrive(ctx, f.opts, RedriveOptions{DryRun: true, OnRecord: func(it RedriveItem) { listed = append(listed, it) }})
			if err != nil || dry.Selected != 1 || len(listed) != 1 {
				t.Fatalf("dry run %+v (%v), listed %d: want the dead letter selected", dry, err, len(listed))
			}
			res, err := redrive(ctx, f.opts, RedriveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.cause != "" {
				if it := listed[0]; it.Outcome != RedriveDeadLettered || it.Cause == nil || !strings.Contains(it.Cause.Error(), tc.cause) {
					t.Errorf("dry run of the dead letter of a gone row: %+v, want dead-lettered again because of the %s", it, tc.cause)
				}
				if res.Sent != 0 || res.DeadLettered != 1 {
					t.Fatalf("redrive %+v: want the dead letter dead-lettered again, nothing sent", res)
				}
				var again *kgo.Record
				for _, r := range relaytest.ConsumeAll(t, cluster.ListenAddrs(), sink.DefaultDLQTopic, 2) {
					if relaytest.HeaderValue(r, sink.HeaderDLQAttempts) != "" {
						again = r
					}
				}
				if again == nil || relaytest.HeaderValue(again, sink.HeaderID) != gone || relaytest.HeaderValue(again, sink.HeaderDLQAttempts) != "1" ||
					!strings.Contains(relaytest.HeaderValue(again, sink.HeaderDLQError), tc.cause) {
					t.Fatalf("dead-lettered again: %+v, want %s with attempts 1 and the cause naming the %s", again, gone, tc.cause)
				}
				return
			}
			if it := listed[0]; it.Outcome != RedriveWouldSend {
				t.Errorf("dry run: %+v, want would_send", it)
			}
			if res.Sent != 1 || res.FromRow != 0 || res.DeadLettered != 0 {
				t.Fatalf("redrive %+v: want the dead letter sent from the stored record", res)
			}
			got := relaytest.ConsumeAll(t, cluster.ListenAddrs(), name+".refused", 1)[0]
			if string(got.Value) != string(ran.Value) || relaytest.HeaderValue(got, sink.HeaderID) != gone {
				t.Errorf("redriven %s value %s, want %s as run wrote the same payload", relaytest.HeaderValue(got, sink.HeaderID), got.Value, ran.Value)
			}
		})
	}
}
