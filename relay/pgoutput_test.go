package relay

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
)

// A minimal pgoutput v1 encoder for the tests of this package: the decoder
// gets the same bytes as from a walsender.

type pgoBuf []byte

func (b pgoBuf) u8(v byte) pgoBuf     { return append(b, v) }
func (b pgoBuf) u16(v uint16) pgoBuf  { return binary.BigEndian.AppendUint16(b, v) }
func (b pgoBuf) u32(v uint32) pgoBuf  { return binary.BigEndian.AppendUint32(b, v) }
func (b pgoBuf) u64(v uint64) pgoBuf  { return binary.BigEndian.AppendUint64(b, v) }
func (b pgoBuf) cstr(s string) pgoBuf { return append(append(b, s...), 0) }
func (b pgoBuf) ts(t time.Time) pgoBuf {
	return b.u64(uint64(t.Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds()))
}

func pgoBegin(final pglogrepl.LSN, at time.Time, xid uint32) []byte {
	return pgoBuf{'B'}.u64(uint64(final)).ts(at).u32(xid)
}

func pgoCommit(commit, end pglogrepl.LSN, at time.Time) []byte {
	return pgoBuf{'C'}.u8(0).u64(uint64(commit)).u64(uint64(end)).ts(at)
}

// pgoOutboxRelation is the Relation message of walrelay's default outbox table.
func pgoOutboxRelation(id uint32, schema, name string) []byte {
	cols := []struct {
		name string
		oid  uint32
	}{{"id", 2950}, {"aggregate_type", 25}, {"aggregate_id", 25}, {"event_type", 25}, {"payload", 3802}, {"headers", 3802}}
	b := pgoBuf{'R'}.u32(id).cstr(schema).cstr(name).u8('d').u16(uint16(len(cols)))
	for i, c := range cols {
		flags := byte(0)
		if i == 0 {
			flags = 1 // part of the key
		}
		b = b.u8(flags).cstr(c.name).u32(c.oid).u32(0xffffffff)
	}
	return b
}

// pgoOutboxInsert is an INSERT into the default outbox table (text values).
func pgoOutboxInsert(rel uint32, id, aggType, aggID, evType, payload string) []byte {
	vals := []string{id, aggType, aggID, evType, payload, "{}"}
	b := pgoBuf{'I'}.u32(rel).u8('N').u16(uint16(len(vals)))
	for _, v := range vals {
		b = append(b.u8('t').u32(uint32(len(v))), v...)
	}
	return b
}

func pgoMessage(transactional bool, lsn pglogrepl.LSN, prefix string, content []byte) []byte {
	flags := byte(0)
	if transactional {
		flags = 1
	}
	return append(pgoBuf{'M'}.u8(flags).u64(uint64(lsn)).cstr(prefix).u32(uint32(len(content))), content...)
}
