package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/sr"
)

// codec encodes one schema's body, appending it to dst. An error wraps
// ErrMismatch. Safe for concurrent use.
type codec interface {
	encode(dst, data []byte) ([]byte, error)
}

// Target is what picks an event's rule and subject.
type Target struct {
	// Topic is the record's topic (for the topic strategies).
	Topic string
	// Table is the event's table as decoder.Event.Table: "schema.table", or
	// "" for a tableless event.
	Table string
	// EventType is the event's type.
	EventType string
}

// TopicOf returns the topic of every event of table (as Target.Table) and
// event type ("" for any), when that topic does not depend on the event
// itself; ok is false when it does (e.g. a template with {aggregate_type}).
type TopicOf func(table, eventType string) (topic string, ok bool)

// Encoder encodes payloads and keys by its rules. Encode, Register and Check
// are safe for concurrent use. Building one dials nothing; the registry is
// first asked by Register, Check or the first Encode of each binding.
type Encoder struct {
	cl     *client
	log    *slog.Logger
	rules  map[ruleKey]*rule
	order  []*rule
	tables map[string]bool // tables with at least one rule

	mu       sync.Mutex
	resolved map[resolveKey]*resolved
	codecs   map[codecKey]codec
}

type rule struct {
	id         ruleKey
	value, key *binding // key nil: the key is not encoded
}

func (r *rule) bindings() []*binding {
	if r.key == nil {
		return []*binding{r.value}
	}
	return []*binding{r.value, r.key}
}

// binding is a Binding made ready: its file read, its format and record
// name known.
type binding struct {
	cfg      Binding
	what     string // "table public.outbox value", for messages
	role     string // "value" or "key": the topic strategy's suffix
	format   Format // "" for a look-up that accepts any format
	strategy Strategy
	text     string // the file's schema
	record   string // the record's full name, for the record strategies
	refs     []sr.SchemaReference
	local    codec // compiled from the file at New (files without references)
}

// topicBound reports whether b's subject depends on the record's topic.
func (b *binding) topicBound() bool { return b.cfg.Subject == "" && b.strategy != StrategyRecord }

func (b *binding) subject(topic string) string {
	switch {
	case b.cfg.Subject != "":
		return b.cfg.Subject
	case b.strategy == StrategyRecord:
		return b.record
	case b.strategy == StrategyTopicRecord:
		return topic + "-" + b.record
	}
	return topic + "-" + b.role
}

// resolveKey is a binding and, for topic-bound subjects, the topic.
type resolveKey struct {
	b     *binding
	topic string
}

// resolved is a binding's schema in the registry, ready to encode with.
type resolved struct {
	subject string
	id      int
	header  []byte // magic byte, schema id, Protobuf message indexes
	codec   codec
}

type codecKey struct {
	id      int
	message string
}

// DefaultTimeout is Config.Timeout's default.
const DefaultTimeout = 10 * time.Second

// New checks cfg, reads and parses its schema files and builds the registry
// client. It does not dial the registry. A nil log takes slog.Default().
func New(cfg Config, log *slog.Logger) (*Encoder, error) {
	if log == nil {
		log = slog.Default()
	}
	if !cfg.Enabled() {
		return nil, errors.New("schema: no rules to encode with")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	rules, err := cfg.allRules()
	if err != nil {
		return nil, err
	}
	e := &Encoder{log: log, rules: map[ruleKey]*rule{}, tables: map[string]bool{},
		resolved: map[resolveKey]*resolved{}, codecs: map[codecKey]codec{}}
	for _, rc := range rules {
		r := &rule{id: ruleKey{rc.Table, rc.EventType}}
		if r.value, err = newBinding(rc.Value, r.id, "value", cfg.Strategy); err != nil {
			return nil, err
		}
		if rc.Key.set() {
			if r.key, err = newBinding(rc.Key, r.id, "key", cfg.Strategy); err != nil {
				return nil, err
			}
		}
		e.rules[r.id] = r
		e.order = append(e.order, r)
		e.tables[r.id.table] = true
	}
	if e.cl, err = newClient(cfg, log); err != nil {
		return nil, err
	}
	return e, nil
}

func newBinding(c Binding, k ruleKey, role string, def Strategy) (*binding, error) {
	b := &binding{cfg: c, what: k.String() + " " + role, role: role, format: c.Format, strategy: c.strategy(def),
		record: c.Record, refs: srRefs(c.References)}
	if c.File == "" {
		return b, nil
	}
	fail := func(err error) error {
		return &SettingError{Setting: "Rules", Err: fmt.Errorf("%s: %s: %w", b.what, c.File, err)}
	}
	text, err := os.ReadFile(c.File)
	if err != nil {
		return nil, fail(err)
	}
	b.text = string(text)
	if b.format == "" {
		b.format = formatOfExt[filepath.Ext(c.File)]
	}
	if len(b.refs) == 0 { // compile now: a broken file fails at start
		if b.local, err = compile(context.Background(), b.format, b.text, nil, c.Message); err != nil {
			return nil, fail(err)
		}
	}
	if b.strategy != StrategyTopic && c.Subject == "" {
		if b.record, err = recordName(b.format, b.text, c.Message); err != nil {
			return nil, fail(err)
		}
	}
	return b, nil
}

// compile builds the codec of a schema text with its resolved references.
func compile(ctx context.Context, f Format, text string, deps []namedSchema, message string) (codec, error) {
	switch f {
	case FormatProtobuf:
		return compileProto(ctx, text, deps, message)
	case FormatJSON:
		return compileJSON(text, deps)
	}
	if message != "" {
		return nil, fmt.Errorf("%w: a message name is for Protobuf schemas, this one is Avro", ErrInvalidSchema)
	}
	return parseAvro(text, deps)
}

// recordName is the full name the record strategies use.
func recordName(f Format, text, message string) (string, error) {
	switch f {
	case FormatProtobuf:
		return protoRecordName(text, message)
	case FormatJSON:
		return jsonRecordName(text)
	}
	var top struct{ Name, Namespace string }
	if err := json.Unmarshal([]byte(text), &top); err != nil || top.Name == "" {
		return "", fmt.Errorf("%w: Avro: the record strategies need a named schema (a record, enum or fixed)", ErrInvalidSchema)
	}
	if top.Namespace == "" || bytes.ContainsRune([]byte(top.Name), '.') {
		return top.Name, nil
	}
	return top.Namespace + "." + top.Name, nil
}

// Encode encodes value and key for the event t describes. A table without
// rules keeps both as they are; so does a nil value (a tombstone stays
// null). The key is encoded only when the rule has a key schema.
//
// Errors: ErrMismatch (the value or key does not fit, or the table has rules
// but none for the event's type: the event's fault), ErrUnavailable (try
// again later), or a permanent error of the registry or the configuration
// (ErrNotAuthorized, ErrSubjectMissing, ErrRefused, ErrInvalidSchema). ctx
// bounds the registry calls of a binding's first use.
func (e *Encoder) Encode(ctx context.Context, t Target, value, key []byte) ([]byte, []byte, error) {
	table := t.Table
	if table == "" {
		table = MessageTable
	}
	r := e.rules[ruleKey{table, t.EventType}]
	if r == nil {
		r = e.rules[ruleKey{table, ""}]
	}
	if r == nil {
		if e.tables[table] {
			return nil, nil, mismatch("%s has schema rules, none for event type %q (add a rule for it, or one for the whole table)",
				ruleKey{table, ""}, t.EventType)
		}
		return value, key, nil
	}
	var err error
	if value != nil {
		if value, err = e.encode(ctx, r.value, t.Topic, value); err != nil {
			return nil, nil, err
		}
	}
	if r.key != nil {
		data, err := keyJSON(key)
		if err != nil {
			return nil, nil, err
		}
		if key, err = e.encode(ctx, r.key, t.Topic, data); err != nil {
			return nil, nil, err
		}
	}
	return value, key, nil
}

// keyJSON is the key's JSON: the aggregate id when it is a JSON object or
// array, else the aggregate id as a JSON string.
func keyJSON(key []byte) ([]byte, error) {
	if t := bytes.TrimSpace(key); len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t) {
		return t, nil
	}
	if !utf8.Valid(key) {
		return nil, mismatch("the key is not UTF-8 text")
	}
	return json.Marshal(string(key))
}

func (e *Encoder) encode(ctx context.Context, b *binding, topic string, data []byte) ([]byte, error) {
	res, err := e.resolve(ctx, b, topic)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(res.header), len(res.header)+len(data)+16)
	copy(out, res.header)
	out, err = res.codec.encode(out, data)
	if err != nil && b.role == "key" && errors.Is(err, ErrMismatch) {
		// The codecs name the top of what they encode "the value".
		err = mismatch("%s", strings.Replace(strings.TrimPrefix(err.Error(), ErrMismatch.Error()+": "), "the value", "the key", 1))
	}
	if err != nil {
		return nil, fmt.Errorf("%w (%s: subject %q, schema id %d)", err, b.what, res.subject, res.id)
	}
	return out, nil
}

// resolve returns b's schema for topic, asking the registry on first use.
// A failure is not remembered: the next call asks again.
func (e *Encoder) resolve(ctx context.Context, b *binding, topic string) (*resolved, error) {
	k := resolveKey{b: b}
	if b.topicBound() {
		k.topic = topic
	}
	e.mu.Lock()
	r := e.resolved[k]
	e.mu.Unlock()
	if r != nil {
		return r, nil
	}
	r, err := e.fetch(ctx, b, topic)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.what, err)
	}
	e.mu.Lock()
	if old := e.resolved[k]; old != nil {
		r = old
	} else {
		e.resolved[k] = r
	}
	e.mu.Unlock()
	return r, nil
}

// fetch registers b's file, or looks b's subject up, and compiles the
// schema with its references.
func (e *Encoder) fetch(ctx context.Context, b *binding, topic string) (*resolved, error) {
	subject := b.subject(topic)
	r := &resolved{subject: subject}
	var (
		f    = b.format
		text = b.text
		refs = b.refs
		err  error
	)
	if b.cfg.File != "" {
		s := sr.Schema{Schema: b.text, Type: srType(b.format), References: b.refs}
		if r.id, err = e.cl.register(ctx, subject, s); err != nil {
			return nil, fmt.Errorf("%s: %w", b.cfg.File, err)
		}
		e.log.Info("schema registered", "subject", subject, "id", r.id, "file", b.cfg.File, "rule", b.what)
	} else {
		ss, err := e.cl.lookup(ctx, subject, b.cfg.Version)
		if err != nil {
			return nil, err
		}
		if got := formatOf(ss.Type); f != "" && got != f {
			return nil, fmt.Errorf("%w: subject %q version %d is %s, the rule expects %s", ErrInvalidSchema, subject, ss.Version, got, f)
		}
		f, text, refs, r.id = formatOf(ss.Type), ss.Schema.Schema, ss.References, ss.ID
		e.log.Info("schema looked up", "subject", subject, "id", r.id, "version", ss.Version, "rule", b.what)
	}
	if r.codec, err = e.codec(ctx, r.id, f, text, refs, b); err != nil {
		return nil, fmt.Errorf("subject %q schema id %d: %w", subject, r.id, err)
	}
	var index []int
	if pc, ok := r.codec.(*protoCodec); ok {
		index = pc.index
	}
	r.header, _ = (&sr.ConfluentHeader{}).AppendEncode(nil, r.id, index)
	return r, nil
}

// codec returns the compiled schema of id (with b's message), compiling it
// on first use.
func (e *Encoder) codec(ctx context.Context, id int, f Format, text string, refs []sr.SchemaReference, b *binding) (codec, error) {
	k := codecKey{id, b.cfg.Message}
	e.mu.Lock()
	c := e.codecs[k]
	e.mu.Unlock()
	if c != nil {
		return c, nil
	}
	if b.local != nil && text == b.text {
		c = b.local
	} else {
		deps, err := e.cl.references(ctx, refs)
		if err != nil {
			return nil, err
		}
		if c, err = compile(ctx, f, text, deps, b.cfg.Message); err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	e.codecs[k] = c
	e.mu.Unlock()
	return c, nil
}

// Register registers every schema file and looks up every subject that is
// known before the first event: all but the topic-strategy subjects whose
// topic depends on the event (those are resolved on their topic's first
// event). It returns one error naming each subject that failed: missing,
// refused by the registry (with its message), or unusable; or the first
// ErrUnavailable or ErrNotAuthorized error (the others would repeat it).
func (e *Encoder) Register(ctx context.Context, topicOf TopicOf) error {
	var errs []error
	for _, r := range e.order {
		for _, b := range r.bindings() {
			topic, ok := e.knownTopic(r, b, topicOf)
			if !ok {
				continue
			}
			if _, err := e.resolve(ctx, b, topic); err != nil {
				if IsRetryable(err) || errors.Is(err, ErrNotAuthorized) || ctx.Err() != nil {
					return err
				}
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// knownTopic returns the topic b's subject is derived from before any
// event: "" when the subject does not depend on one; ok false when it
// depends on the event.
func (e *Encoder) knownTopic(r *rule, b *binding, topicOf TopicOf) (string, bool) {
	if !b.topicBound() {
		return "", true
	}
	if topicOf == nil {
		return "", false
	}
	table := r.id.table
	if table == MessageTable {
		table = ""
	}
	return topicOf(table, r.id.eventType)
}
