package decoder

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"
)

// FuzzDecode feeds a sequence of messages to a decoder. The input is a flags
// byte followed by messages, each a 2-byte big-endian length and its bytes
// (a short last message takes what is left). Flag bit 0 primes the decoder
// with the Relation and Type messages of the capture and of the hand-built
// tests, so that inserts hit known outbox tables (public.routed, with a
// partition column and header columns, starts without two of its header
// columns); bit 1 starts inside a transaction. Decode must never panic, and
// what it returns must obey the package invariants.
func FuzzDecode(f *testing.F) {
	// Seeds from the capture: each transaction with the messages before it
	// (its Relation messages included), from a fresh decoder; and each
	// message alone, primed and inside a transaction. Messages over 4 KiB
	// (the 20000-byte bytea) are left out: big seeds make the fuzzer spend
	// its time minimizing.
	msgs := readCapture(f, capturePath)
	var group [][]byte
	for _, m := range msgs {
		if len(m.data) > 4096 {
			continue
		}
		group = append(group, m.data)
		if m.data[0] == 'C' {
			f.Add(fuzzInput(0, group...))
			group = nil
		}
		f.Add(fuzzInput(3, m.data))
	}
	row := goodRow()
	row[5] = txt(`{"traceparent": "t\u00e9", "n": 1, "k": "v"}`)
	for _, seed := range [][][]byte{
		{encInsert(relOutbox, row...), encInsert(relBlob, txt("e"), txt("k"), txt(`\x6b`), txt("t"), txt(`a\\b\001`))},
		{encRelation(relOutbox, "public", "outbox", outboxCols...), encInsert(relOutbox, goodRow()...),
			encRelation(relOutbox, "public", "outbox_old", outboxCols...), encInsert(relOutbox, goodRow()...)},
		{encRelation(relRouted, "app", "routed", routedCols...), encInsert(relRouted, append(goodRow(), null(), txt(""))...)},
		{encMessage(true, 0, "walrelay.outbox", []byte(`{"id":"e","aggregate_type":"a","aggregate_id":7,"event_type":"t","payload":"p\n","headers":{"x":"y"}}`))},
		{encRelation(relOutbox, "public", "outbox", append(outboxCols, rc{"source", oidText})...), encInsert(relOutbox, append(row, txt("s"))...)},
		{encUpdate(relOutbox, 'O', row, row...), encDelete(relOutbox, 'K', row...), encTruncate(0, relOther, relOutbox)},
		{encCommit(1, 2, commitTime), encBegin(3, commitTime, 4), encOrigin(5, "o"), encType(6, "s", "t")},
		// public.routed: header columns absent, then added; bad values.
		{encInsert(relRouted, routedRow()[:9]...), encRelation(relRouted, "public", "routed", routedCols...),
			encInsert(relRouted, append(row, txt("2147483647"), txt("tr"), null(), txt(`a\\b\001`))...)},
		{encInsert(relRouted, append(goodRow(), txt("-1"), unchanged())...),
			encInsert(relRouted, append(goodRow(), null(), txt(""))...),
			encRelation(relRouted, "public", "routed", append([]rc{{"sig", oidBytea}}, routedCols[:8]...)...),
			encInsert(relRouted, append([]tv{txt(`\x0`)}, append(goodRow(), txt("x"))...)...)},
		{encMessage(true, 0, "walrelay.outbox", []byte(`{"id":"e","aggregate_type":"a","aggregate_id":"k","event_type":"t","partition":7}`)),
			encMessage(true, 0, "walrelay.outbox", []byte(`{"id":"e","aggregate_type":"a","aggregate_id":"k","event_type":"t","partition":-1.5e3}`))},
	} {
		f.Add(fuzzInput(3, seed...))
	}
	// Envelope columns on public.routed.
	f.Add(fuzzInput(11, encInsert(relRouted, append(goodRow(), txt("7"), txt("tr"))...),
		encInsert(relRouted, append(goodRow(), null(), txt(`\x`))...),
		encRelation(relRouted, "public", "routed", append(routedCols[:7:7], rc{"part", 1186}, rc{"trace_id", oidText})...)))
	// The outbox known by OID arrives under another name.
	f.Add(fuzzInput(7, encRelation(relOutbox, "public", "outbox_old", outboxCols...), encInsert(relOutbox, goodRow()...)))

	prime := primeMessages(msgs)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		flags, rest := in[0], in[1:]
		cfg := captureConfig()
		cfg.Tables = append(cfg.Tables, testConfig().Tables[1], Table{Name: "routed", Columns: routedColumns()})
		if flags&8 != 0 {
			// Envelope columns (and a header renamed) on public.routed.
			rc := &cfg.Tables[len(cfg.Tables)-1].Columns
			rc.Envelope = []EnvelopeColumn{{Column: "part", Name: "p"}, {Column: "trace_id"}, {Column: "payload", Name: "again"}}
			rc.HeaderNames = []string{"signature"}
		}
		if flags&4 != 0 {
			// Tables known by OID (renamed-table handling), read halfway
			// through the fuzzed messages' positions.
			cfg.Tables[0].OID, cfg.Tables[len(cfg.Tables)-1].OID = relOutbox, relRouted
			cfg.OIDsReadAt = 0x1000000 + 32*0x100
		}
		d, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var out Output
		var xid uint32
		var commitTime time.Time
		if flags&1 != 0 {
			for _, m := range prime {
				if err := d.Decode(0, m, &out); err != nil {
					t.Fatalf("prime: %v", err)
				}
			}
		}
		if flags&2 != 0 {
			xid, commitTime = 700, time.Unix(1e9, 0).UTC()
			if err := d.Decode(1, encBegin(2, commitTime, xid), &out); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; len(rest) > 0 && i < 64; i++ {
			var msg []byte
			if len(rest) < 2 {
				msg, rest = rest, nil
			} else {
				n := int(binary.BigEndian.Uint16(rest))
				rest = rest[2:]
				n = min(n, len(rest))
				msg, rest = rest[:n], rest[n:]
			}
			buf := bytes.Clone(msg)
			walStart := pglogrepl.LSN(0x1000000 + i*0x100)
			wasInTxn := d.InTxn()
			err := d.Decode(walStart, buf, &out)
			if err != nil {
				checkDecodeError(t, err, walStart, msg)
				if out.Kind != KindNone || d.InTxn() != wasInTxn {
					t.Fatalf("after error: kind %s, in txn %v (was %v)", out.Kind, d.InTxn(), wasInTxn)
				}
				continue
			}
			snap := snapshot(&out)
			for j := range buf {
				buf[j] ^= 0xFF // pgconn reuses its buffer: nothing may alias it
			}
			if !snapshotEqual(snap, &out) {
				t.Fatalf("output aliases the input buffer")
			}
			switch out.Kind {
			case KindBegin:
				if wasInTxn || !d.InTxn() {
					t.Fatalf("begin: in txn %v -> %v", wasInTxn, d.InTxn())
				}
				xid, commitTime = out.XID, out.CommitTime
			case KindCommit:
				if !wasInTxn || d.InTxn() || out.XID != xid {
					t.Fatalf("commit: in txn %v -> %v, xid %d (begin %d)", wasInTxn, d.InTxn(), out.XID, xid)
				}
			default:
				if d.InTxn() != wasInTxn {
					t.Fatalf("%s changed the transaction state", out.Kind)
				}
			}
			switch out.Kind {
			case KindEvent:
				checkEvent(t, &out.Event, msg[0], wasInTxn, walStart, xid, commitTime)
			case KindIgnored:
				if out.Reason == "" {
					t.Fatal("ignored without a reason")
				}
			case KindNone, KindBegin, KindCommit, KindHeartbeat:
			default:
				t.Fatalf("kind %d", out.Kind)
			}
			if out.Kind != KindEvent && !eventIsZero(&out.Event) {
				t.Fatalf("%s with an event: %+v", out.Kind, out.Event)
			}
		}
	})
}

// primeMessages returns the first Relation of each relation ID in the
// capture, its Type messages, and the hand-built test relations.
func primeMessages(msgs []captured) [][]byte {
	var prime [][]byte
	seen := map[uint32]bool{}
	for _, m := range msgs {
		switch m.data[0] {
		case 'R':
			id := binary.BigEndian.Uint32(m.data[1:])
			if !seen[id] {
				seen[id] = true
				prime = append(prime, m.data)
			}
		case 'Y':
			prime = append(prime, m.data)
		}
	}
	return append(prime,
		encRelation(relOutbox, "public", "outbox", outboxCols...),
		encRelation(relOther, "public", "other", rc{"k", 23}, rc{"v", oidText}),
		encRelation(relBlob, "app", "blob", blobCols...),
		encRelation(relRouted, "public", "routed", routedCols[:9]...), // no tenant_id, no sig
	)
}

func fuzzInput(flags byte, msgs ...[]byte) []byte {
	in := []byte{flags}
	for _, m := range msgs {
		in = binary.BigEndian.AppendUint16(in, uint16(len(m)))
		in = append(in, m...)
	}
	return in
}

var streamErrors = []error{ErrTruncated, ErrUnknownMessage, ErrUnknownRelation, ErrMissingColumn, ErrEnvelopeType, ErrTableRenamed, ErrProtocol}

var valueErrors = []error{ErrNullAggregateID, ErrNullField, ErrBadHeaders, ErrBadPayload, ErrBadTimestamp, ErrBadMessage, ErrBadPartition, ErrUnsupportedValue}

func isOneOf(err error, targets []error) bool {
	for _, s := range targets {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func checkDecodeError(t *testing.T, err error, walStart pglogrepl.LSN, msg []byte) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) || !isOneOf(err, streamErrors) {
		t.Fatalf("error %v is not a *DecodeError wrapping a sentinel", err)
	}
	if de.LSN != walStart || de.Offset < 0 || de.Offset > len(msg) || (len(msg) > 0 && de.Type != msg[0]) {
		t.Fatalf("bad DecodeError %+v for a %d-byte message", de, len(msg))
	}
	_ = de.Error()
}

func checkEvent(t *testing.T, e *Event, typ byte, inTxn bool, walStart pglogrepl.LSN, xid uint32, commitTime time.Time) {
	t.Helper()
	if !inTxn {
		t.Fatalf("event from %c outside a transaction", typ)
	}
	switch typ {
	case 'I':
		if e.Table == "" || e.TableName == "" {
			t.Fatalf("table event without a table: %+v", e)
		}
	case 'M':
		if e.Table != "" || e.TableName != "" {
			t.Fatalf("message event with a table: %+v", e)
		}
	default:
		t.Fatalf("event from a %c message", typ)
	}
	if e.LSN != walStart || e.XID != xid || !e.CommitTime.Equal(commitTime) {
		t.Fatalf("event position %s/%d/%s, want %s/%d/%s", e.LSN, e.XID, e.CommitTime, walStart, xid, commitTime)
	}
	if e.Poison != nil && !isOneOf(e.Poison, valueErrors) {
		t.Fatalf("poison %v wraps no sentinel", e.Poison)
	}
	if e.AggregateIDNull && (e.AggregateID != nil || e.Poison == nil) {
		t.Fatalf("NULL aggregate id: %q, poison %v", e.AggregateID, e.Poison)
	}
	if e.Poison == nil && e.AggregateID == nil {
		t.Fatal("no key and no poison")
	}
	for _, h := range e.Headers {
		if h.Value == nil {
			t.Fatalf("header %q has a nil value", h.Key)
		}
	}
	for _, f := range e.Envelope {
		if f.Name == "" || f.Null != (f.Value == nil) || !EnvelopeType(f.Type) {
			t.Fatalf("envelope field %+v", f)
		}
	}
	if e.Partition < 0 || (!e.HasPartition && e.Partition != 0) {
		t.Fatalf("partition %d, has partition %v", e.Partition, e.HasPartition)
	}
	if errors.Is(e.Poison, ErrBadPartition) && e.HasPartition {
		t.Fatalf("partition %d with poison %v", e.Partition, e.Poison)
	}
}

func eventIsZero(e *Event) bool {
	return e.Table == "" && e.TableName == "" && e.ID == "" && e.AggregateType == "" && e.AggregateID == nil &&
		!e.AggregateIDNull && e.EventType == "" && e.Payload == nil && e.Headers == nil && e.Timestamp.IsZero() &&
		e.Partition == 0 && !e.HasPartition && e.CommitTime.IsZero() && e.LSN == 0 && e.XID == 0 && e.Poison == nil &&
		e.Envelope == nil && e.PayloadType == 0
}

type outputSnapshot struct {
	content, key, payload []byte
	headers               []Header
	envelope              []EnvelopeField
	strs                  [3]string
}

func snapshot(o *Output) outputSnapshot {
	s := outputSnapshot{
		content: bytes.Clone(o.Content), key: bytes.Clone(o.Event.AggregateID), payload: bytes.Clone(o.Event.Payload),
		strs: [3]string{o.Event.ID, o.Event.AggregateType, o.Event.EventType},
	}
	for _, h := range o.Event.Headers {
		s.headers = append(s.headers, Header{Key: h.Key, Value: bytes.Clone(h.Value)})
	}
	for _, f := range o.Event.Envelope {
		f.Value = bytes.Clone(f.Value)
		s.envelope = append(s.envelope, f)
	}
	return s
}

func snapshotEqual(s outputSnapshot, o *Output) bool {
	if !bytes.Equal(s.content, o.Content) || !bytes.Equal(s.key, o.Event.AggregateID) || !bytes.Equal(s.payload, o.Event.Payload) ||
		s.strs != [3]string{o.Event.ID, o.Event.AggregateType, o.Event.EventType} || len(s.headers) != len(o.Event.Headers) {
		return false
	}
	for i, h := range o.Event.Headers {
		if h.Key != s.headers[i].Key || !bytes.Equal(h.Value, s.headers[i].Value) {
			return false
		}
	}
	if len(s.envelope) != len(o.Event.Envelope) {
		return false
	}
	for i, f := range o.Event.Envelope {
		if w := s.envelope[i]; f.Name != w.Name || f.Type != w.Type || f.Null != w.Null || !bytes.Equal(f.Value, w.Value) {
			return false
		}
	}
	return true
}

// FuzzHeaders checks the JSON scanner against encoding/json: the same
// documents are objects, and the same string entries come out.
func FuzzHeaders(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { } `, `null`, `{"a": "b", "n": 1, "o": {"x": [1, "y", null]}, "e": "\u00e9\ud83d\ude00\n"}`,
		`{"a": "b",}`, `["a"]`, `"s"`, `{"a"}`, `{"a": tru}`, `{"a": -0.5e+10, "b": 01}`, `{"k\"": "v\\"}`,
		`{"a": "\ud800\u0041"}`, `{"a": "\udc00"}`, "{\"a\": \"\x01\"}", `{"a": 1.}`, `{"a": [1,]}`, `{"a":"b"}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var d Decoder
		sb, ok := d.parseHeaders(nil, doc)
		wantOK, wantHeaders := stdHeaders(doc)
		if ok != wantOK {
			t.Fatalf("parseHeaders ok = %v, encoding/json says %v", ok, wantOK)
		}
		if !ok || !utf8.Valid(doc) {
			return // encoding/json replaces invalid UTF-8; we keep the bytes
		}
		if len(d.hspans) != len(wantHeaders) {
			t.Fatalf("got %d headers, want %d", len(d.hspans), len(wantHeaders))
		}
		start := 0
		for i, h := range d.hspans {
			k, v := string(sb[h.keyStart:h.keyEnd]), string(d.hvals[start:h.valEnd])
			start = h.valEnd
			if k != wantHeaders[i][0] || v != wantHeaders[i][1] {
				t.Fatalf("header %d = %q: %q, want %q: %q", i, k, v, wantHeaders[i][0], wantHeaders[i][1])
			}
		}
	})
}

// stdHeaders is parseHeaders done with encoding/json.
func stdHeaders(doc []byte) (bool, [][2]string) {
	if !json.Valid(doc) {
		return false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	tok, err := dec.Token()
	if err != nil {
		return false, nil
	}
	if tok == nil {
		return true, nil // JSON null
	}
	if tok != json.Delim('{') {
		return false, nil
	}
	var hs [][2]string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return false, nil
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return false, nil
		}
		var s string
		if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
			hs = append(hs, [2]string{k.(string), s})
		}
	}
	if _, err := dec.Token(); err != nil {
		return false, nil
	}
	if _, err := dec.Token(); err != io.EOF {
		return false, nil
	}
	return true, hs
}

// FuzzParseTimestamp: no panics, and what parses is a valid UTC time that
// formats back to the same instant.
func FuzzParseTimestamp(f *testing.F) {
	for _, s := range []string{
		"2026-11-21 05:40:01.123456+00", "2026-11-21 11:10:01+05:30", "1900-01-01 05:21:10+05:21:10",
		"2026-11-21 05:40:01", "2026-11-21T05:40:01Z", "2024-02-29 00:00:00-03", "infinity", "2026-13-01 00:00:00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		ts, ok := parseTimestamp(s)
		if !ok {
			return
		}
		if ts.Location() != time.UTC {
			t.Fatalf("location %v", ts.Location())
		}
		back, ok := parseTimestamp([]byte(ts.Format("2006-01-02 15:04:05.999999999") + "+00"))
		if ts.Year() >= 1 && ts.Year() <= 9999 && (!ok || !back.Equal(ts)) {
			t.Fatalf("%q -> %s does not round-trip", s, ts)
		}
	})
}
