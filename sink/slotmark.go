package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A slot mark is walrelay's own record that it made a replication slot (or
// was about to): one record per slot, database and server in the
// checkpoint topic, in both delivery modes. A slot that is missing while
// its mark exists was lost, and creating it again would skip what it had
// not delivered; a slot with no mark was never made by walrelay, and a
// first start creates it. The mark is written before the slot is created:
// a kill -9 between the two leaves a mark without a slot (the next start
// refuses though nothing was streamed: duplicates after a recovery, never
// a loss).

// SlotMark is the mark of a slot walrelay created.
type SlotMark struct {
	SystemID string    `json:"system_id"`
	Database string    `json:"database"`
	Slot     string    `json:"slot"`
	By       string    `json:"by"` // "run" or "recovery"; "run" also for a slot run found made by an older release
	At       time.Time `json:"at"` // when the mark was written
}

// SlotMarkKey is the key of a slot's mark in the checkpoint topic:
// "<system id>/<database>/<slot>/slot". It never equals a checkpoint's key
// (CheckpointKey), which has no database.
func SlotMarkKey(systemID, database, slot string) string {
	return systemID + "/" + database + "/" + slot + "/slot"
}

// Key is m's key.
func (m SlotMark) Key() string { return SlotMarkKey(m.SystemID, m.Database, m.Slot) }

// WriteSlotMark writes m to topic (created compacted, with replication
// factor rf, when missing) and returns once Kafka acknowledged it. It
// produces outside any transaction, with a client of its own.
func (s *Sink) WriteSlotMark(ctx context.Context, topic string, rf int16, m SlotMark) error {
	if err := s.EnsureCheckpointTopic(ctx, topic, rf); err != nil {
		return err
	}
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	cl, err := s.NewClient(kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(m.Key()), Value: v}).FirstErr(); err != nil {
		return fmt.Errorf("kafka: write the mark of slot %q to %q: %w", m.Slot, topic, err)
	}
	return nil
}

// DeleteSlotMark writes the tombstone of key (SlotMarkKey) to topic: the
// slot it marked was not created after all.
func (s *Sink) DeleteSlotMark(ctx context.Context, topic, key string) error {
	cl, err := s.NewClient(kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key)}).FirstErr(); err != nil {
		return fmt.Errorf("kafka: delete the slot mark %q from %q: %w", key, topic, err)
	}
	return nil
}

// ReadSlotMark returns the mark of key (SlotMarkKey) in topic; ok is false
// when there is none, also when the topic does not exist. It reads as
// ReadCheckpoint does.
func (s *Sink) ReadSlotMark(ctx context.Context, topic, key string) (m SlotMark, ok bool, err error) {
	rec, err := s.readLastOfKey(ctx, topic, key)
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return m, false, nil
	case err != nil || rec == nil || rec.Value == nil: // nil: deleted (DeleteSlotMark)
		return m, false, err
	}
	if err := json.Unmarshal(rec.Value, &m); err != nil {
		return m, false, &CheckpointFormatError{Topic: topic, Key: key, Partition: rec.Partition, Offset: rec.Offset, Err: err}
	}
	return m, true, nil
}
