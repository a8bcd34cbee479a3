package decoder

import (
	"fmt"

	"github.com/jackc/pglogrepl"
)

// Event construction. Each event owns exactly two fresh allocations in the
// common case: one string holding ID, AggregateType and EventType (and the
// header keys), and one byte slice holding AggregateID and Payload (and the
// header values); events with headers (from the headers column or from header
// columns) add the []Header. Nothing aliases the
// input or the decoder's scratch buffers, so the caller may hand the event to
// other goroutines and keep it after the next Decode.

// columnPoison returns the poison for a mapped column that is not text.
func columnPoison(m *mapping, role int, v colVal, nullErr error) error {
	return valuePoison(m.col[role], v, nullErr)
}

// valuePoison returns the poison for the value v of column name that is not
// text: nullErr for NULL (nil: NULL is fine), ErrUnsupportedValue for an
// unchanged TOAST pointer or binary format.
func valuePoison(name string, v colVal, nullErr error) error {
	switch v.kind {
	case colText:
		return nil
	case colNull:
		if nullErr == nil {
			return nil
		}
		return fmt.Errorf("column %q: %w", name, nullErr)
	case colUnchanged:
		return fmt.Errorf("column %q: %w: unchanged TOAST value", name, ErrUnsupportedValue)
	default:
		return fmt.Errorf("column %q: %w: binary format", name, ErrUnsupportedValue)
	}
}

// eventBuilder assembles one event in the decoder's scratch buffers, from a
// row (tableEvent) or a tableless message (messageEvent): the first problem
// with a value poisons the event, the strings collect in sb, and finish
// allocates the event's memory once.
type eventBuilder struct {
	d      *Decoder
	out    *Output
	filter *Filter // the table's, nil when none
	ev     *Event
	sb     []byte // ID, AggregateType, EventType, then the header keys
	strEnd [3]int // ends of ID, AggregateType and EventType in sb
	poison error
}

// newEvent starts the event of out at walStart in the open transaction.
func (d *Decoder) newEvent(walStart pglogrepl.LSN, out *Output) *eventBuilder {
	out.Kind = KindEvent
	ev := &out.Event
	ev.LSN, ev.XID, ev.CommitTime = walStart, d.xid, d.commitTime
	d.hspans = d.hspans[:0]
	d.hvals = d.hvals[:0]
	b := &d.builder
	*b = eventBuilder{d: d, out: out, ev: ev, sb: d.sbuf[:0]}
	return b
}

// setPoison records err as the event's poison unless one is recorded.
func (b *eventBuilder) setPoison(err error) {
	if b.poison == nil {
		b.poison = err
	}
}

// finish allocates and fills the event (see Decoder.finish) and keeps the
// scratch buffers for the next one.
func (b *eventBuilder) finish(key []byte, keyLen int, keyBytea bool, pay []byte, payLen int, payBytea bool) {
	d := b.d
	d.sbuf = b.sb
	d.finish(b.ev, b.sb, b.strEnd, key, keyLen, keyBytea, pay, payLen, payBytea)
	b.ev.Poison = b.poison
	if b.filter != nil && b.poison == nil {
		if why := b.filter.drops(b.ev); why != "" {
			b.out.Kind, b.out.Reason, b.out.Table = KindFiltered, why, b.ev.Table
		}
	}
	d.trimScratch()
	*b = eventBuilder{}
}

func (d *Decoder) tableEvent(rel *relation, msg []byte, walStart pglogrepl.LSN, out *Output) {
	m := rel.m
	b := d.newEvent(walStart, out)
	b.filter = m.filter
	ev, setPoison := b.ev, b.setPoison
	ev.Table, ev.TableName = rel.table, rel.name

	// Strings: ID, AggregateType, EventType.
	for i, role := range [3]int{roleID, roleAggregateType, roleEventType} {
		v := d.vals[m.idx[role]]
		if p := columnPoison(m, role, v, ErrNullField); p != nil {
			setPoison(p)
		} else {
			b.sb = append(b.sb, v.in(msg)...)
		}
		b.strEnd[i] = len(b.sb)
	}

	// Key.
	keyLen := -1 // NULL or unusable
	key := d.vals[m.idx[roleAggregateID]]
	keyData := key.in(msg)
	if p := columnPoison(m, roleAggregateID, key, ErrNullAggregateID); p != nil {
		setPoison(p)
		ev.AggregateIDNull = key.kind == colNull
	} else if m.typ[roleAggregateID] == oidBytea {
		if n, ok := byteaLen(keyData); ok {
			keyLen = n
		} else {
			setPoison(fmt.Errorf("column %q: %w", m.col[roleAggregateID], ErrBadPayload))
		}
	} else {
		keyLen = len(keyData)
	}

	// Payload.
	payLen := -1 // NULL or unusable
	pay := d.vals[m.idx[rolePayload]]
	payData := pay.in(msg)
	if p := columnPoison(m, rolePayload, pay, nil); p != nil {
		setPoison(p)
	} else if pay.kind == colText {
		if m.typ[rolePayload] == oidBytea {
			if n, ok := byteaLen(payData); ok {
				payLen = n
			} else {
				setPoison(fmt.Errorf("column %q: %w", m.col[rolePayload], ErrBadPayload))
			}
		} else {
			payLen = len(payData)
		}
	}

	// Headers: keys go to b.sb, values to d.hvals.
	if i := m.idx[roleHeaders]; i >= 0 {
		v := d.vals[i]
		if p := columnPoison(m, roleHeaders, v, nil); p != nil {
			setPoison(p)
		} else if doc := v.in(msg); v.kind == colText && !(len(doc) == 2 && doc[0] == '{' && doc[1] == '}') {
			ok := true
			if m.typ[roleHeaders] == oidBytea {
				if _, ok = byteaLen(doc); ok {
					d.tmp = decodeBytea(d.tmp[:0], doc)
					doc = d.tmp
				}
			}
			if ok {
				b.sb, ok = d.parseHeaders(b.sb, doc)
			}
			if !ok {
				setPoison(fmt.Errorf("column %q: %w", m.col[roleHeaders], ErrBadHeaders))
			}
		}
	}
	if len(m.hdr) > 0 {
		b.sb = d.headerColumns(b.sb, m.hdr, msg, setPoison)
	}

	// Timestamp.
	if i := m.idx[roleTimestamp]; i >= 0 {
		v := d.vals[i]
		if p := columnPoison(m, roleTimestamp, v, nil); p != nil {
			setPoison(p)
		} else if v.kind == colText {
			if t, ok := parseTimestamp(v.in(msg)); ok {
				ev.Timestamp = t
			} else {
				setPoison(fmt.Errorf("column %q: %w: %.64q", m.col[roleTimestamp], ErrBadTimestamp, v.in(msg)))
			}
		}
	}

	// Partition.
	if i := m.idx[rolePartition]; i >= 0 {
		v := d.vals[i]
		if p := columnPoison(m, rolePartition, v, nil); p != nil {
			setPoison(p)
		} else if v.kind == colText {
			if n, ok := parsePartition(v.in(msg)); ok {
				ev.Partition, ev.HasPartition = n, true
			} else {
				setPoison(fmt.Errorf("column %q: %w: %.64q", m.col[rolePartition], ErrBadPartition, v.in(msg)))
			}
		}
	}

	b.finish(keyData, keyLen, m.typ[roleAggregateID] == oidBytea, payData, payLen, m.typ[rolePayload] == oidBytea)
}

// headerColumns appends one header per non-NULL header column, after those
// already recorded: the column name to sb, the value (bytea decoded) to
// d.hvals. A value that cannot be a header poisons the event and adds none.
func (d *Decoder) headerColumns(sb []byte, hdr []hdrCol, msg []byte, setPoison func(error)) []byte {
	for _, h := range hdr {
		v := d.vals[h.idx]
		if p := valuePoison(h.name, v, nil); p != nil {
			setPoison(p)
			continue
		}
		if v.kind != colText { // NULL: no header
			continue
		}
		data := v.in(msg)
		if h.typ == oidBytea {
			if _, ok := byteaLen(data); !ok {
				setPoison(fmt.Errorf("column %q: %w", h.name, ErrBadPayload))
				continue
			}
			d.hvals = decodeBytea(d.hvals, data)
		} else {
			d.hvals = append(d.hvals, data...)
		}
		ks := len(sb)
		sb = append(sb, h.name...)
		d.hspans = append(d.hspans, hdrSpan{keyStart: ks, keyEnd: len(sb), valEnd: len(d.hvals)})
	}
	return sb
}

// maxScratch is the largest scratch buffer kept between calls, so that one
// huge message does not pin its memory for the life of the decoder.
const maxScratch = 64 << 10

func (d *Decoder) trimScratch() {
	if cap(d.sbuf) > maxScratch {
		d.sbuf = nil
	}
	if cap(d.hvals) > maxScratch {
		d.hvals = nil
	}
	if cap(d.tmp) > maxScratch {
		d.tmp = nil
	}
	if cap(d.hspans) > maxScratch/16 {
		d.hspans = nil
	}
}

// finish allocates the event's string and byte slice and fills the fields.
// keyLen/payLen < 0 leave AggregateID/Payload nil.
func (d *Decoder) finish(ev *Event, sb []byte, strEnd [3]int,
	key []byte, keyLen int, keyBytea bool,
	pay []byte, payLen int, payBytea bool) {
	var s string
	if len(sb) > 0 {
		s = string(sb)
	}
	ev.ID = s[:strEnd[0]]
	ev.AggregateType = s[strEnd[0]:strEnd[1]]
	ev.EventType = s[strEnd[1]:strEnd[2]]
	if len(d.hspans) > 0 {
		ev.Headers = make([]Header, len(d.hspans))
		for i, h := range d.hspans {
			ev.Headers[i].Key = s[h.keyStart:h.keyEnd]
		}
	}
	total := len(d.hvals)
	if keyLen > 0 {
		total += keyLen
	}
	if payLen > 0 {
		total += payLen
	}
	if keyLen < 0 && payLen < 0 && len(d.hspans) == 0 {
		return
	}
	buf := make([]byte, total)
	off := 0
	if keyLen >= 0 {
		k := buf[off : off+keyLen : off+keyLen]
		if keyBytea {
			decodeBytea(k[:0], key)
		} else {
			copy(k, key)
		}
		ev.AggregateID = k
		off += keyLen
	}
	if payLen >= 0 {
		p := buf[off : off+payLen : off+payLen]
		if payBytea {
			decodeBytea(p[:0], pay)
		} else {
			copy(p, pay)
		}
		ev.Payload = p
		off += payLen
	}
	if len(d.hspans) > 0 {
		copy(buf[off:], d.hvals)
		start := 0
		for i, h := range d.hspans {
			ev.Headers[i].Value = buf[off+start : off+h.valEnd : off+h.valEnd]
			start = h.valEnd
		}
	}
}

// parseHeaders appends the keys of the top-level string entries of the JSON
// object doc to sb and their values to d.hvals, recording d.hspans. JSON null
// means no headers. It reports false (recording nothing) when doc is not a
// valid JSON object.
func (d *Decoder) parseHeaders(sb, doc []byte) ([]byte, bool) {
	base := len(sb)
	o := newJSONObject(doc)
	for o.next() {
		if o.m.value[0] != '"' {
			continue
		}
		ks := len(sb)
		if o.m.keyEscaped {
			sb = appendJSONUnescaped(sb, o.m.key)
		} else {
			sb = append(sb, o.m.key...)
		}
		d.hvals = appendJSONString(d.hvals, o.m.value, o.m.valueEscaped)
		d.hspans = append(d.hspans, hdrSpan{keyStart: ks, keyEnd: len(sb), valEnd: len(d.hvals)})
	}
	if !o.ok {
		d.hspans, d.hvals = d.hspans[:0], d.hvals[:0]
		if isJSONNull(doc) {
			return sb[:base], true
		}
		return sb[:base], false
	}
	return sb, true
}

// Message field names of a tableless outbox event.
const (
	fieldID            = "id"
	fieldAggregateType = "aggregate_type"
	fieldAggregateID   = "aggregate_id"
	fieldEventType     = "event_type"
	fieldPayload       = "payload"
	fieldHeaders       = "headers"
	fieldPartition     = "partition"
)

// messageEvent decodes the JSON content of a tableless outbox message.
func (d *Decoder) messageEvent(content []byte, walStart pglogrepl.LSN, out *Output) {
	b := d.newEvent(walStart, out)
	b.filter = d.messageFilter
	ev, setPoison := b.ev, b.setPoison

	var (
		fields  [numRoles][]byte // raw JSON values, nil when absent
		escaped [numRoles]bool   // string values with escapes
	)
	o := newJSONObject(content)
	for o.next() {
		key := o.m.key
		if o.m.keyEscaped {
			d.tmp = appendJSONUnescaped(d.tmp[:0], key)
			key = d.tmp
		}
		role := -1
		switch string(key) {
		case fieldID:
			role = roleID
		case fieldAggregateType:
			role = roleAggregateType
		case fieldAggregateID:
			role = roleAggregateID
		case fieldEventType:
			role = roleEventType
		case fieldPayload:
			role = rolePayload
		case fieldHeaders:
			role = roleHeaders
		case fieldPartition:
			role = rolePartition
		}
		if role >= 0 { // the last of duplicate keys wins, as in encoding/json
			fields[role], escaped[role] = o.m.value, o.m.valueEscaped
		}
	}
	if !o.ok {
		// Not a JSON object: keep the content as the payload so that a
		// dead-letter record carries it.
		ev.Payload = append([]byte(nil), content...)
		if ev.Payload == nil {
			ev.Payload = []byte{}
		}
		ev.Poison = fmt.Errorf("%w: not a JSON object", ErrBadMessage)
		return
	}

	names := [numRoles]string{roleID: fieldID, roleAggregateType: fieldAggregateType, roleAggregateID: fieldAggregateID,
		roleEventType: fieldEventType, rolePayload: fieldPayload, roleHeaders: fieldHeaders, rolePartition: fieldPartition}

	// Strings: id (string or number), aggregate_type, event_type (strings).
	for i, role := range [3]int{roleID, roleAggregateType, roleEventType} {
		v := fields[role]
		switch {
		case v == nil || v[0] == 'n':
			setPoison(fmt.Errorf("field %q: %w", names[role], ErrNullField))
		case v[0] == '"':
			b.sb = appendJSONString(b.sb, v, escaped[role])
		case role == roleID && (v[0] == '-' || isDigit(v[0])):
			b.sb = append(b.sb, v...)
		default:
			setPoison(fmt.Errorf("field %q: %w: want a string", names[role], ErrBadMessage))
		}
		b.strEnd[i] = len(b.sb)
	}

	// Key (string or number) and payload go to d.tmp first: unescaping needs
	// a pass to know the length.
	tmp := d.tmp[:0]
	keyLen := -1
	switch v := fields[roleAggregateID]; {
	case v == nil || v[0] == 'n':
		ev.AggregateIDNull = true
		setPoison(fmt.Errorf("field %q: %w", fieldAggregateID, ErrNullAggregateID))
	case v[0] == '"':
		tmp = appendJSONString(tmp, v, escaped[roleAggregateID])
		keyLen = len(tmp)
	case v[0] == '-' || isDigit(v[0]):
		tmp = append(tmp, v...)
		keyLen = len(tmp)
	default:
		setPoison(fmt.Errorf("field %q: %w: want a string or number", fieldAggregateID, ErrBadMessage))
	}
	payLen := -1
	switch v := fields[rolePayload]; {
	case v == nil || v[0] == 'n':
	default:
		// Any JSON value, strings included, is the payload as its JSON
		// text: what payload::text gives for a jsonb column, so the table
		// and tableless outboxes produce the same bytes.
		tmp = append(tmp, v...)
		payLen = len(tmp) - max(keyLen, 0)
	}
	d.tmp = tmp

	if v := fields[roleHeaders]; v != nil && v[0] != 'n' {
		ok := v[0] == '{'
		if ok {
			b.sb, ok = d.parseHeaders(b.sb, v)
		}
		if !ok {
			setPoison(fmt.Errorf("field %q: %w", fieldHeaders, ErrBadHeaders))
		}
	}

	// Partition: an integer number, or null.
	switch v := fields[rolePartition]; {
	case v == nil || v[0] == 'n':
	case v[0] == '-' || isDigit(v[0]):
		if n, ok := parsePartition(v); ok {
			ev.Partition, ev.HasPartition = n, true
		} else {
			setPoison(fmt.Errorf("field %q: %w: %.64s", fieldPartition, ErrBadPartition, v))
		}
	default:
		setPoison(fmt.Errorf("field %q: %w: want an integer", fieldPartition, ErrBadMessage))
	}

	k := max(keyLen, 0)
	b.finish(tmp[:k], keyLen, false, tmp[k:], payLen, false)
}
