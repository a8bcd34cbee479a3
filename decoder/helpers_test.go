package decoder

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// This file holds the test helpers: a pgoutput v1 encoder for hand-built
// messages and a reader for the capture files in testdata/capture.

// pgo builds one pgoutput message.
type pgo struct{ b []byte }

func newMsg(t byte) *pgo             { return &pgo{b: []byte{t}} }
func (p *pgo) u8(v byte) *pgo        { p.b = append(p.b, v); return p }
func (p *pgo) u16(v uint16) *pgo     { p.b = binary.BigEndian.AppendUint16(p.b, v); return p }
func (p *pgo) u32(v uint32) *pgo     { p.b = binary.BigEndian.AppendUint32(p.b, v); return p }
func (p *pgo) u64(v uint64) *pgo     { p.b = binary.BigEndian.AppendUint64(p.b, v); return p }
func (p *pgo) str(s string) *pgo     { p.b = append(append(p.b, s...), 0); return p }
func (p *pgo) raw(b []byte) *pgo     { p.b = append(p.b, b...); return p }
func (p *pgo) time(t time.Time) *pgo { return p.u64(uint64(t.Sub(pgEpoch).Microseconds())) }
func (p *pgo) bytes() []byte         { return p.b }
func (p *pgo) tuple(vals ...tv) *pgo {
	p.u16(uint16(len(vals)))
	for _, v := range vals {
		p.u8(v.kind)
		if v.kind == 't' || v.kind == 'b' {
			p.u32(uint32(len(v.data)))
			p.b = append(p.b, v.data...)
		}
	}
	return p
}

var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// tv is one tuple value.
type tv struct {
	kind byte
	data string
}

func txt(s string) tv  { return tv{'t', s} }
func null() tv         { return tv{kind: 'n'} }
func unchanged() tv    { return tv{kind: 'u'} }
func binv(s string) tv { return tv{'b', s} }

func encBegin(finalLSN pglogrepl.LSN, commit time.Time, xid uint32) []byte {
	return newMsg('B').u64(uint64(finalLSN)).time(commit).u32(xid).bytes()
}

func encCommit(commitLSN, endLSN pglogrepl.LSN, commit time.Time) []byte {
	return newMsg('C').u8(0).u64(uint64(commitLSN)).u64(uint64(endLSN)).time(commit).bytes()
}

func encOrigin(lsn pglogrepl.LSN, name string) []byte {
	return newMsg('O').u64(uint64(lsn)).str(name).bytes()
}

func encType(oid uint32, ns, name string) []byte {
	return newMsg('Y').u32(oid).str(ns).str(name).bytes()
}

// rc is one Relation column.
type rc struct {
	name string
	typ  uint32
}

func encRelation(id uint32, ns, name string, cols ...rc) []byte {
	p := newMsg('R').u32(id).str(ns).str(name).u8('d').u16(uint16(len(cols)))
	for i, c := range cols {
		flags := byte(0)
		if i == 0 {
			flags = 1
		}
		p.u8(flags).str(c.name).u32(c.typ).u32(0xffffffff)
	}
	return p.bytes()
}

func encInsert(rel uint32, vals ...tv) []byte {
	return newMsg('I').u32(rel).u8('N').tuple(vals...).bytes()
}

// encUpdate encodes an update; oldKind is 0 (no old tuple), 'K' or 'O'.
func encUpdate(rel uint32, oldKind byte, old []tv, vals ...tv) []byte {
	p := newMsg('U').u32(rel)
	if oldKind != 0 {
		p.u8(oldKind).tuple(old...)
	}
	return p.u8('N').tuple(vals...).bytes()
}

func encDelete(rel uint32, kind byte, key ...tv) []byte {
	return newMsg('D').u32(rel).u8(kind).tuple(key...).bytes()
}

func encTruncate(options byte, rels ...uint32) []byte {
	p := newMsg('T').u32(uint32(len(rels))).u8(options)
	for _, r := range rels {
		p.u32(r)
	}
	return p.bytes()
}

func encMessage(transactional bool, lsn pglogrepl.LSN, prefix string, content []byte) []byte {
	flags := byte(0)
	if transactional {
		flags = 1
	}
	return newMsg('M').u8(flags).u64(uint64(lsn)).str(prefix).u32(uint32(len(content))).raw(content).bytes()
}

// A capture file is the magic line, then records of an 8-byte big-endian
// walStart, a 4-byte big-endian length and that many bytes of WALData.
const captureMagic = "walrelay-pgoutput-capture v1\n"

type captured struct {
	walStart pglogrepl.LSN
	data     []byte
}

func readCapture(tb testing.TB, path string) []captured {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	msgs, err := parseCapture(b)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return msgs
}

func parseCapture(b []byte) ([]captured, error) {
	if !bytes.HasPrefix(b, []byte(captureMagic)) {
		return nil, fmt.Errorf("not a capture file")
	}
	b = b[len(captureMagic):]
	var msgs []captured
	for len(b) > 0 {
		if len(b) < 12 {
			return nil, fmt.Errorf("truncated record header")
		}
		lsn := binary.BigEndian.Uint64(b)
		n := int(binary.BigEndian.Uint32(b[8:]))
		b = b[12:]
		if len(b) < n {
			return nil, fmt.Errorf("truncated record")
		}
		msgs = append(msgs, captured{pglogrepl.LSN(lsn), b[:n:n]})
		b = b[n:]
	}
	return msgs, nil
}
