package decoder

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
)

// pgoutput v1 message types.
const (
	msgBegin    = 'B'
	msgCommit   = 'C'
	msgOrigin   = 'O'
	msgRelation = 'R'
	msgType     = 'Y'
	msgInsert   = 'I'
	msgUpdate   = 'U'
	msgDelete   = 'D'
	msgTruncate = 'T'
	msgMessage  = 'M'
)

// Tuple column kinds.
const (
	colNull      = 'n'
	colUnchanged = 'u'
	colText      = 't'
	colBinary    = 'b'
)

// Decoder decodes a pgoutput (proto_version 1, messages on, no streaming, no
// binary) stream into Outputs. It holds the relation cache and the open
// transaction as explicit state. It is not safe for concurrent use: one
// goroutine feeds it the messages of one replication session, in order.
type Decoder struct {
	heartbeatPrefix string
	messagePrefix   string
	messageFilter   *Filter // nil: every tableless event is published
	tables          []Table
	oids            map[uint32]int // Table.OID -> index in tables
	oidsReadAt      pglogrepl.LSN

	rels map[uint32]*relation
	last *relation // the relation of the previous change, for the hot path

	inTxn      bool
	xid        uint32
	commitTime time.Time

	// scratch, reused between calls
	vals    []colVal
	sbuf    []byte // strings of the event under construction
	hvals   []byte // unescaped header values
	hspans  []hdrSpan
	evals   []byte    // envelope values (envelope.go)
	espans  []envSpan // the envelope fields of the event under construction
	tmp     []byte
	builder eventBuilder // the event under construction (build.go)

	rowBuf []byte       // the values of the row under construction (row.go)
	rowRel *rowRelation // the relation of the last row (row.go)
}

// relation is a cached Relation message.
type relation struct {
	id     uint32
	schema string
	name   string
	table  string // schema.name
	cols   []column
	m      *mapping // nil: not an outbox table under this name
	ti     int      // index of the configured table; -1 when none

	// A configured outbox table under another name (m == nil): alias is
	// the relation under its configured name (m set, unless aliasErr says
	// why not). renamed: known from an earlier Relation of this session
	// rather than by OID, so a rename after its first events.
	alias    *relation
	aliasErr error
	renamed  bool
}

type column struct {
	name string
	typ  uint32
	mod  int32 // type modifier
}

// mapping locates the configured columns of an outbox table in its tuples.
type mapping struct {
	filter *Filter       // nil: every event is published
	idx    [numRoles]int // column index, -1 when not mapped
	typ    [numRoles]uint32
	col    [numRoles]string // configured column names
	hdr    []hdrCol         // the header columns the relation has, in configured order
	env    []envCol         // the envelope columns, in configured order
}

// hdrCol is a header column present in the relation.
type hdrCol struct {
	name string // the column
	key  string // the header's name
	idx  int
	typ  uint32
}

// colVal is one tuple column: its kind and where its bytes are in the
// message. Offsets rather than a slice keep pointers (and GC write barriers)
// out of the hot loop.
type colVal struct {
	kind     byte
	off, end int
}

// in returns the column's bytes in msg, the message it was read from.
func (v colVal) in(msg []byte) []byte { return msg[v.off:v.end:v.end] }

// hdrSpan locates one header: its key in sbuf (from keyStart), its value in
// hvals (ending at valEnd; starting at the previous span's valEnd).
type hdrSpan struct {
	keyStart, keyEnd int
	valEnd           int
}

// New returns a Decoder for cfg, with defaults applied, or the reason cfg is
// invalid. It starts outside any transaction with an empty relation cache.
func New(cfg Config) (*Decoder, error) {
	n, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	d := &Decoder{
		heartbeatPrefix: n.HeartbeatPrefix,
		messagePrefix:   n.MessagePrefix,
		messageFilter:   filterOf(&n.MessageFilter),
		tables:          n.Tables,
		oids:            make(map[uint32]int),
		oidsReadAt:      n.OIDsReadAt,
		rels:            make(map[uint32]*relation),
	}
	for i, t := range n.Tables {
		if t.OID != 0 {
			d.oids[t.OID] = i
		}
	}
	return d, nil
}

// InTxn reports whether a Begin was decoded and its Commit not yet.
func (d *Decoder) InTxn() bool { return d.inTxn }

// Decode decodes one pgoutput message (the WALData of one XLogData) that
// starts at walStart. It never retains data: everything in out is copied.
// out is reset first and must not be nil.
//
// Stream-level problems (truncated or malformed bytes, unknown message types
// or relations, a Begin inside a transaction, a mapped column missing from a
// Relation, an INSERT into a renamed outbox table) return a *DecodeError and leave out reset (Kind == KindNone); the
// decoder state is then unchanged except that a Relation failing with
// ErrMissingColumn is dropped from the cache. Value-level problems of an
// outbox event set Event.Poison instead and return nil.
func (d *Decoder) Decode(walStart pglogrepl.LSN, data []byte, out *Output) error {
	if out == nil {
		return &DecodeError{LSN: walStart, Err: errors.New("nil output")}
	}
	out.reset()
	if len(data) == 0 {
		return &DecodeError{LSN: walStart, Err: ErrTruncated}
	}
	r := reader{b: data, off: 1}
	switch data[0] {
	case msgBegin:
		d.begin(&r, out)
	case msgCommit:
		d.commit(&r, out)
	case msgOrigin:
		r.u64()
		r.cstring()
		r.end()
	case msgRelation:
		d.relation(&r)
	case msgType:
		r.u32()
		r.cstring()
		r.cstring()
		r.end()
	case msgInsert:
		d.insert(&r, walStart, out)
	case msgUpdate, msgDelete:
		d.updateDelete(&r, data[0], out)
	case msgTruncate:
		d.truncate(&r, out)
	case msgMessage:
		d.message(&r, walStart, out)
	default:
		r.errOff = 0
		r.err = ErrUnknownMessage
	}
	if r.err != nil {
		out.reset()
		return &DecodeError{LSN: walStart, Type: data[0], Offset: r.errOff, Err: r.err}
	}
	return nil
}

// reset clears o for the next Decode, keeping Content's buffer.
func (o *Output) reset() {
	c := o.Content[:0]
	*o = Output{Content: c}
}

func (d *Decoder) begin(r *reader, out *Output) {
	finalLSN := pglogrepl.LSN(r.u64())
	commitTime := r.pgTime()
	xid := r.u32()
	r.end()
	if r.err != nil {
		return
	}
	if d.inTxn {
		r.fail(fmt.Errorf("%w: begin of xid %d inside transaction %d", ErrProtocol, xid, d.xid))
		return
	}
	d.inTxn, d.xid, d.commitTime = true, xid, commitTime
	out.Kind = KindBegin
	out.XID = xid
	out.CommitLSN = finalLSN
	out.CommitTime = commitTime
}

func (d *Decoder) commit(r *reader, out *Output) {
	r.u8() // flags, unused
	commitLSN := pglogrepl.LSN(r.u64())
	endLSN := pglogrepl.LSN(r.u64())
	commitTime := r.pgTime()
	r.end()
	if r.err != nil {
		return
	}
	if !d.inTxn {
		r.fail(fmt.Errorf("%w: commit outside a transaction", ErrProtocol))
		return
	}
	out.Kind = KindCommit
	out.XID = d.xid
	out.CommitLSN = commitLSN
	out.EndLSN = endLSN
	out.CommitTime = commitTime
	d.inTxn, d.xid, d.commitTime = false, 0, time.Time{}
}

// minColumnBytes is the smallest encoding of a Relation column: flags,
// an empty name, type OID and type modifier.
const minColumnBytes = 1 + 1 + 4 + 4

func (d *Decoder) relation(r *reader) {
	id := r.u32()
	ns := r.cstring()
	name := r.cstring()
	r.u8() // replica identity
	n := int(int16(r.u16()))
	if r.err != nil {
		return
	}
	if n < 0 {
		r.fail(fmt.Errorf("%w: negative column count %d", ErrProtocol, n))
		return
	}
	if n*minColumnBytes > r.remaining() {
		r.fail(ErrTruncated)
		return
	}
	cols := make([]column, n)
	for i := range cols {
		r.u8() // flags (part of the key)
		cname := r.cstring()
		typ := r.u32()
		mod := int32(r.u32())
		if r.err != nil {
			return
		}
		cols[i] = column{name: string(cname), typ: typ, mod: mod}
	}
	r.end()
	if r.err != nil {
		return
	}
	schema := string(ns)
	if schema == "" {
		schema = "pg_catalog" // pgoutput sends pg_catalog as ""
	}
	rel := &relation{id: id, schema: schema, name: string(name), cols: cols, ti: -1}
	rel.table = schema + "." + rel.name
	// A new Relation replaces the old one for the same ID (schema change,
	// rename).
	prev := d.rels[id]
	delete(d.rels, id)
	d.last = nil
	ti := -1
	for i := range d.tables {
		if d.tables[i].Schema == schema && d.tables[i].Name == rel.name {
			ti = i
			break
		}
	}
	oi, byOID := d.oids[id]
	switch {
	case ti >= 0 && (!byOID || oi == ti):
		m, err := newMapping(rel, d.tables[ti].Columns)
		if m != nil {
			m.filter = filterOf(&d.tables[ti].Filter)
		}
		if err != nil {
			r.fail(err)
			return
		}
		rel.m, rel.ti = m, ti
	case byOID:
		// A configured table's OID under another name. Whether that name
		// is older or newer than the configured one is decided by the
		// LSN of its inserts (Relation messages carry none).
		rel.alias, rel.aliasErr = d.aliasOf(rel, oi)
	case prev != nil && prev.ti >= 0:
		// Mapped earlier in this session, now under a name that is not.
		rel.alias, rel.aliasErr = d.aliasOf(rel, prev.ti)
		rel.renamed = true
	}
	d.rels[id] = rel
}

// aliasOf returns rel as configured table i: under its configured name and
// mapped with its columns, or the reason the columns do not map.
func (d *Decoder) aliasOf(rel *relation, i int) (*relation, error) {
	t := &d.tables[i]
	a := &relation{id: rel.id, schema: t.Schema, name: t.Name, table: t.Schema + "." + t.Name, cols: rel.cols, ti: i}
	m, err := newMapping(a, t.Columns)
	if m != nil {
		m.filter = filterOf(&t.Filter)
	}
	a.m = m
	return a, err
}

// resolveAlias returns the relation to build an INSERT at walStart into
// rel, a configured table under another name, from: its alias when the
// name is older than the configuration's, else nil and the error to stop
// with.
func (d *Decoder) resolveAlias(rel *relation, walStart pglogrepl.LSN) (*relation, error) {
	if rel.renamed || walStart >= d.oidsReadAt {
		return nil, &TableRenamedError{Table: rel.alias.table, Now: rel.table, OID: rel.id,
			was: [2]string{rel.alias.schema, rel.alias.name}, now: [2]string{rel.schema, rel.name}}
	}
	if rel.aliasErr != nil {
		return nil, rel.aliasErr
	}
	return rel.alias, nil
}

func newMapping(rel *relation, c Columns) (*mapping, error) {
	m := &mapping{}
	for role, f := range c.fields() {
		m.idx[role] = -1
		m.col[role] = f.column
		if f.column == "" {
			continue
		}
		for i, col := range rel.cols {
			if col.name == f.column {
				m.idx[role], m.typ[role] = i, col.typ
				break
			}
		}
		if m.idx[role] < 0 {
			return nil, &MissingColumnError{Table: rel.table, Column: f.column, Field: f.name}
		}
	}
	// Header columns may be absent: they appear with a later Relation.
	for j, name := range c.HeaderColumns {
		for i, col := range rel.cols {
			if col.name == name {
				m.hdr = append(m.hdr, hdrCol{name: name, key: c.headerName(j), idx: i, typ: col.typ})
				break
			}
		}
	}
	// Envelope columns are mapped: each must be there.
	for _, e := range c.Envelope {
		i := slices.IndexFunc(rel.cols, func(col column) bool { return col.name == e.Column })
		if i < 0 {
			return nil, &MissingColumnError{Table: rel.table, Column: e.Column, Field: "Envelope"}
		}
		if !EnvelopeType(rel.cols[i].typ) {
			return nil, &EnvelopeTypeError{Table: rel.table, Column: e.Column, Type: rel.cols[i].typ}
		}
		m.env = append(m.env, envCol{name: e.name(), col: e.Column, idx: i, typ: rel.cols[i].typ, mod: rel.cols[i].mod})
	}
	return m, nil
}

// lookup returns the cached relation or fails with ErrUnknownRelation,
// pointing at the relation ID (offset 1).
func (d *Decoder) lookup(r *reader, id uint32) *relation {
	if d.last != nil && d.last.id == id {
		return d.last
	}
	rel := d.rels[id]
	if rel == nil {
		r.err, r.errOff = fmt.Errorf("%w: relation id %d", ErrUnknownRelation, id), 1
		return nil
	}
	d.last = rel
	return rel
}

func (d *Decoder) needTxn(r *reader, what string) bool {
	if !d.inTxn {
		r.fail(fmt.Errorf("%w: %s outside a transaction", ErrProtocol, what))
		return false
	}
	return true
}

// readTuple reads TupleData into d.vals.
func (d *Decoder) readTuple(r *reader) {
	n := int(int16(r.u16()))
	if r.err != nil {
		return
	}
	if n < 0 {
		r.fail(fmt.Errorf("%w: negative column count %d", ErrProtocol, n))
		return
	}
	if n > r.remaining() { // each column takes at least its kind byte
		r.fail(ErrTruncated)
		return
	}
	vals := d.vals[:0]
	for range n {
		kind := r.u8()
		switch kind {
		case colNull, colUnchanged:
			vals = append(vals, colVal{kind: kind})
		case colText, colBinary:
			l := int(int32(r.u32()))
			off := r.off
			r.bytes(l)
			vals = append(vals, colVal{kind: kind, off: off, end: off + max(l, 0)})
		default:
			if r.err == nil {
				r.off--
				r.fail(fmt.Errorf("%w: unknown tuple column kind 0x%02x", ErrProtocol, kind))
			}
		}
		if r.err != nil {
			break
		}
	}
	d.vals = vals
}

func (d *Decoder) insert(r *reader, walStart pglogrepl.LSN, out *Output) {
	id := r.u32()
	if tag := r.u8(); r.err == nil && tag != 'N' {
		r.off--
		r.fail(fmt.Errorf("%w: insert tuple tag 0x%02x", ErrProtocol, tag))
	}
	d.readTuple(r)
	r.end()
	if r.err != nil {
		return
	}
	rel := d.lookup(r, id)
	if rel == nil || !d.needTxn(r, "insert") {
		return
	}
	if rel.m == nil {
		if rel.alias == nil {
			out.Kind, out.Reason, out.Table = KindIgnored, ReasonUnmappedTable, rel.table
			return
		}
		a, err := d.resolveAlias(rel, walStart)
		if err != nil {
			r.errOff, r.err = 1, err // at the relation ID
			return
		}
		rel = a
	}
	if len(d.vals) != len(rel.cols) {
		r.fail(fmt.Errorf("%w: insert into %s has %d columns, its relation %d", ErrProtocol, rel.table, len(d.vals), len(rel.cols)))
		return
	}
	d.tableEvent(rel, r.b, walStart, out)
}

func (d *Decoder) updateDelete(r *reader, typ byte, out *Output) {
	id := r.u32()
	tag := r.u8()
	if typ == msgUpdate {
		if tag == 'K' || tag == 'O' {
			d.readTuple(r)
			tag = r.u8()
		}
		if r.err == nil && tag != 'N' {
			r.off--
			r.fail(fmt.Errorf("%w: update tuple tag 0x%02x", ErrProtocol, tag))
		}
	} else if r.err == nil && tag != 'K' && tag != 'O' {
		r.off--
		r.fail(fmt.Errorf("%w: delete tuple tag 0x%02x", ErrProtocol, tag))
	}
	d.readTuple(r)
	r.end()
	if r.err != nil {
		return
	}
	rel := d.lookup(r, id)
	what, reason := "update", ReasonUpdate
	if typ == msgDelete {
		what, reason = "delete", ReasonDelete
	}
	if rel == nil || !d.needTxn(r, what) {
		return
	}
	out.Kind, out.Reason, out.Table = KindIgnored, reason, rel.table
	if rel.m == nil && rel.alias == nil {
		out.Reason = ReasonUnmappedTable
	}
}

func (d *Decoder) truncate(r *reader, out *Output) {
	n := int(int32(r.u32()))
	r.u8() // options
	if r.err != nil {
		return
	}
	if n < 0 {
		r.fail(fmt.Errorf("%w: negative relation count %d", ErrProtocol, n))
		return
	}
	if n > r.remaining()/4 {
		r.fail(ErrTruncated)
		return
	}
	start := r.off
	for range n {
		r.u32()
	}
	r.end()
	if r.err != nil {
		return
	}
	var first, mapped *relation
	for i := range n {
		id := uint32(r.b[start+4*i])<<24 | uint32(r.b[start+4*i+1])<<16 | uint32(r.b[start+4*i+2])<<8 | uint32(r.b[start+4*i+3])
		rel := d.rels[id]
		if rel == nil {
			r.err, r.errOff = fmt.Errorf("%w: relation id %d", ErrUnknownRelation, id), start+4*i
			return
		}
		if first == nil {
			first = rel
		}
		if mapped == nil && (rel.m != nil || rel.alias != nil) {
			mapped = rel
		}
	}
	if !d.needTxn(r, "truncate") {
		return
	}
	out.Kind = KindIgnored
	switch {
	case mapped != nil:
		out.Reason, out.Table = ReasonTruncate, mapped.table
	case first != nil:
		out.Reason, out.Table = ReasonUnmappedTable, first.table
	default: // TRUNCATE of no relation: not sent by Postgres, harmless
		out.Reason = ReasonTruncate
	}
}

func (d *Decoder) message(r *reader, walStart pglogrepl.LSN, out *Output) {
	flags := r.u8()
	r.u64() // the message's LSN, equal to walStart
	prefix := r.cstring()
	content := r.bytes(int(int32(r.u32())))
	r.end()
	if r.err != nil {
		return
	}
	transactional := flags&1 != 0
	if transactional && !d.needTxn(r, "transactional message") {
		return
	}
	switch {
	case string(prefix) == d.heartbeatPrefix:
		out.Kind = KindHeartbeat
		out.Content = append(out.Content[:0], content...)
	case d.messagePrefix != "" && string(prefix) == d.messagePrefix:
		if !transactional {
			out.Kind, out.Reason = KindIgnored, ReasonNonTransactional
			return
		}
		d.messageEvent(content, walStart, out)
	default:
		out.Kind, out.Reason = KindIgnored, ReasonForeignMessage
	}
}
