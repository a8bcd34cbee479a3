package sink

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Reading back what was produced (the newest records of the outbox topics,
// the dead-letter topic; the checkpoint, checkpoint.go): a record counts as
// a read_committed consumer sees it, decided by its transaction's marker,
// and every offset of a range is accounted for, so the caller knows where
// the decided records end.

// RecordState is what became of a record read back.
type RecordState uint8

const (
	RecordCommitted RecordState = iota // written outside a transaction, or its transaction committed
	RecordAborted                      // its transaction aborted: no read_committed consumer sees it
	RecordOpen                         // its transaction had no marker before the range's end
)

// OffsetRange is a partition's offsets [From, To).
type OffsetRange struct{ From, To int64 }

// NewReadbackClient returns a client of s's brokers and security that
// reads every record, control records included, for ReadRanges. Close it
// when done.
func (s *Sink) NewReadbackClient() (*kgo.Client, error) {
	return s.NewClient(kgo.KeepControlRecords(), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
}

// ReadRanges reads ranges (topic -> partition -> offsets) with cl (from
// NewReadbackClient) and calls fn once for each data record in them, with
// its state: records of a transaction when its marker is read (in offset
// order within the transaction), those whose marker is not in the range at
// its end. It returns when every range was read, fn failed, or ctx ended.
func ReadRanges(ctx context.Context, cl *kgo.Client, ranges map[string]map[int32]OffsetRange, fn func(*kgo.Record, RecordState) error) error {
	type tp struct {
		topic string
		p     int32
	}
	type partState struct {
		r    OffsetRange
		open map[int64][]*kgo.Record // producer id -> records of its open transaction
	}
	parts := map[tp]*partState{}
	add := map[string]map[int32]kgo.Offset{}
	for topic, ps := range ranges {
		for p, r := range ps {
			if r.To <= r.From {
				continue
			}
			parts[tp{topic, p}] = &partState{r: r, open: map[int64][]*kgo.Record{}}
			if add[topic] == nil {
				add[topic] = map[int32]kgo.Offset{}
			}
			add[topic][p] = kgo.NewOffset().At(r.From)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	cl.AddConsumePartitions(add)
	defer func() {
		rm := map[string][]int32{}
		for k := range parts {
			rm[k.topic] = append(rm[k.topic], k.p)
		}
		cl.RemoveConsumePartitions(rm)
	}()
	finish := func(ps *partState) error {
		// What is still open at the range's end, in offset order.
		var rest []*kgo.Record
		for _, rs := range ps.open {
			rest = append(rest, rs...)
		}
		slices.SortFunc(rest, func(a, b *kgo.Record) int { return int(a.Offset - b.Offset) })
		for _, r := range rest {
			if err := fn(r, RecordOpen); err != nil {
				return err
			}
		}
		return nil
	}
	done := map[tp]bool{}
	for len(done) < len(parts) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read back %d partitions: %w", len(parts)-len(done), ctx.Err())
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("read back %s/%d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var err error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			k := tp{fp.Topic, fp.Partition}
			ps := parts[k]
			if ps == nil || done[k] {
				return
			}
			for _, r := range fp.Records {
				if err != nil || done[k] {
					return
				}
				if r.Offset >= ps.r.To {
					done[k] = true
					err = finish(ps)
					return
				}
				switch {
				case r.Attrs.IsControl():
					rs := ps.open[r.ProducerID]
					delete(ps.open, r.ProducerID)
					st := RecordAborted
					if controlCommits(r.Key) {
						st = RecordCommitted
					}
					for _, x := range rs {
						if err = fn(x, st); err != nil {
							return
						}
					}
				case r.Attrs.IsTransactional():
					ps.open[r.ProducerID] = append(ps.open[r.ProducerID], r)
				default:
					err = fn(r, RecordCommitted)
				}
				if err == nil && r.Offset >= ps.r.To-1 {
					done[k] = true
					err = finish(ps)
				}
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}
