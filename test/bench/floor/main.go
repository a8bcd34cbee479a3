// Command floor is the least a relay built on walrelay's dependencies does
// with each outbox event, run in walrelay's place by test/bench/latency.sh (a
// step whose flags include "floor", e.g. LAT_RATES="1000 1000:floor"). It
// takes walrelay's `run` flags that the bench passes, streams the slot with
// pglogrepl (pgoutput, proto_version 1), and turns each insert into one Kafka
// record the bench's consumer reads as it reads walrelay's: topic from
// --topic's {aggregate_type}, key aggregate_id, value payload, timestamp the
// commit time, header walrelay.lsn. Records go to franz-go at the commit
// (acks=all, idempotent, --linger, no compression).
//
// It does none of walrelay's other work: no checkpoint tracking (every second
// it confirms the end of the last transaction received, not the last one
// Kafka acknowledged, so it may lose events on a crash), no backpressure, no
// outbox contract checks, no dead letters, no metrics, and it parses with
// pglogrepl.Parse. Its latency and CPU in the same bench run are what the
// machine, Postgres, Kafka and the client libraries leave for any relay: a
// floor under walrelay's numbers, not a product. On exit it also prints the
// Postgres leg alone to stderr: commit time to Commit message read, per
// transaction, in microseconds (latency.sh shows that line after the step).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kgo"
)

type options struct {
	dsn, brokers, slot, publication, topic, addr string
	linger                                       time.Duration
	procs                                        int
	pprof                                        bool
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, "usage: floor run --postgres-dsn DSN --kafka-brokers B --slot S --publication P --topic T [--linger D] [--procs N]")
		os.Exit(2)
	}
	var o options
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.StringVar(&o.dsn, "postgres-dsn", "", "Postgres DSN")
	fs.StringVar(&o.brokers, "kafka-brokers", "", "Kafka seed brokers, comma-separated")
	fs.StringVar(&o.slot, "slot", "", "replication slot (created with pgoutput when missing)")
	fs.StringVar(&o.publication, "publication", "", "publication (must exist: walrelay's first start creates it, e.g. latency.sh's warm-up)")
	fs.StringVar(&o.topic, "topic", "", "topic; {aggregate_type} is replaced by the row's aggregate_type")
	fs.DurationVar(&o.linger, "linger", 5*time.Millisecond, "franz-go's producer linger (walrelay's default: 5ms)")
	fs.IntVar(&o.procs, "procs", 1, "GOMAXPROCS (0: Go's default), as walrelay's --procs")
	fs.StringVar(&o.addr, "metrics-addr", "127.0.0.1:0", "with --pprof: where /debug/pprof/ is served (no metrics)")
	fs.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof/ on --metrics-addr")
	_ = fs.Parse(os.Args[2:])
	if o.dsn == "" || o.brokers == "" || o.slot == "" || o.publication == "" || o.topic == "" {
		fmt.Fprintln(os.Stderr, "floor: --postgres-dsn, --kafka-brokers, --slot, --publication and --topic are required")
		os.Exit(2)
	}
	if o.procs > 0 {
		runtime.GOMAXPROCS(o.procs)
	}
	if o.pprof {
		ln, err := net.Listen("tcp", o.addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		// The bench finds the address as walrelay's: "addr":"host:port".
		fmt.Fprintf(os.Stderr, "{\"msg\":\"floor pprof\",\"addr\":%q}\n", ln.Addr().String())
		go func() { _ = http.Serve(ln, nil) }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

// maxLegs caps the Postgres-leg samples kept (8 MiB), grown as they come so
// that they do not count in the RSS the bench reports for short runs.
const maxLegs = 1 << 20

// outboxColumns are the positions of the columns a record needs in one
// relation's tuples (-1: absent).
type outboxColumns struct{ aggType, aggID, payload int }

func run(ctx context.Context, o options) error {
	cfg, err := pgconn.ParseConfig(o.dsn)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := pglogrepl.CreateReplicationSlot(ctx, conn, o.slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{}); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42710" { // duplicate_object: the slot exists
			return fmt.Errorf("create slot: %w", err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(o.brokers, ",")...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(o.linger), kgo.AllowAutoTopicCreation())
	if err != nil {
		return err
	}
	defer cl.Close()
	failed := make(chan error, 1)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	}
	if err := pglogrepl.StartReplication(ctx, conn, o.slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + o.publication + "'"},
	}); err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	fmt.Fprintf(os.Stderr, "floor: streaming slot %s, linger %v, procs %d\n", o.slot, o.linger, runtime.GOMAXPROCS(0))

	// One read deadline per status update (every second), moved to now on stop.
	nc := conn.Conn()
	stopWake := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Now()) })
	defer stopWake()
	var received pglogrepl.LSN // end of the last transaction received
	status := func() error {
		return pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: received})
	}
	nextStatus := time.Now().Add(time.Second)
	if err := nc.SetReadDeadline(nextStatus); err != nil {
		return err
	}
	rels := map[uint32]outboxColumns{}
	var txn []*kgo.Record
	var legs []time.Duration // commit -> Commit message received, per transaction (at most maxLegs)
	defer func() { reportLeg(legs) }()
	for ctx.Err() == nil {
		select {
		case err := <-failed:
			return fmt.Errorf("produce: %w", err)
		default:
		}
		if now := time.Now(); !now.Before(nextStatus) {
			if err := status(); err != nil {
				return err
			}
			nextStatus = now.Add(time.Second)
			if err := nc.SetReadDeadline(nextStatus); err != nil {
				return err
			}
		}
		raw, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("receive: %w", err)
		}
		cd, ok := raw.(*pgproto3.CopyData)
		if !ok {
			if er, isErr := raw.(*pgproto3.ErrorResponse); isErr {
				return fmt.Errorf("receive: %w", pgconn.ErrorResponseToPgError(er))
			}
			return fmt.Errorf("receive: unexpected %T", raw)
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return err
			}
			if k.ReplyRequested {
				if err := status(); err != nil {
					return err
				}
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return err
			}
			m, err := pglogrepl.Parse(x.WALData)
			if err != nil {
				return err
			}
			switch m := m.(type) {
			case *pglogrepl.RelationMessage:
				c := outboxColumns{-1, -1, -1}
				for i, col := range m.Columns {
					switch col.Name {
					case "aggregate_type":
						c.aggType = i
					case "aggregate_id":
						c.aggID = i
					case "payload":
						c.payload = i
					}
				}
				rels[m.RelationID] = c
			case *pglogrepl.InsertMessage:
				c, ok := rels[m.RelationID]
				if !ok || c.aggType < 0 || c.aggID < 0 || c.payload < 0 || len(m.Tuple.Columns) <= max(c.aggType, c.aggID, c.payload) {
					return fmt.Errorf("insert at %s into relation %d: not an outbox row", x.WALStart, m.RelationID)
				}
				cols := m.Tuple.Columns
				// Copies: pgconn reuses the receive buffer.
				txn = append(txn, &kgo.Record{
					Topic:   strings.ReplaceAll(o.topic, "{aggregate_type}", string(cols[c.aggType].Data)),
					Key:     bytes.Clone(cols[c.aggID].Data),
					Value:   bytes.Clone(cols[c.payload].Data),
					Headers: []kgo.RecordHeader{{Key: "walrelay.lsn", Value: []byte(x.WALStart.String())}},
				})
			case *pglogrepl.CommitMessage:
				if len(legs) < maxLegs {
					legs = append(legs, time.Since(m.CommitTime))
				}
				for _, r := range txn {
					r.Timestamp = m.CommitTime
					cl.Produce(context.Background(), r, promise)
				}
				txn = txn[:0]
				received = m.TransactionEndLSN
			}
		}
	}
	// Stopped: everything received goes to Kafka before it is confirmed.
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	select {
	case err := <-failed:
		return fmt.Errorf("produce: %w", err)
	default:
	}
	stopWake()
	if err := nc.SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	return status()
}

// reportLeg prints the Postgres leg of every transaction received: its
// commit time (Postgres' clock, microseconds; same machine) to the moment
// its Commit message was read here. The bench's warm-up pings are included.
func reportLeg(legs []time.Duration) {
	if len(legs) == 0 {
		return
	}
	slices.Sort(legs)
	at := func(p float64) float64 {
		return float64(legs[min(len(legs)-1, int(p*float64(len(legs))))]) / 1e6
	}
	fmt.Fprintf(os.Stderr, "floor: commit -> Commit message received, ms (%d transactions): p50 %.2f p90 %.2f p99 %.2f p99.9 %.2f max %.2f\n",
		len(legs), at(0.50), at(0.90), at(0.99), at(0.999), float64(legs[len(legs)-1])/1e6)
}
