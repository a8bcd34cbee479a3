// Package fromdebezium translates a Debezium Postgres connector's
// configuration with the outbox EventRouter into walrelay's (`walrelay
// config from-debezium`). fromdebezium.go is its entry point:
// ParseConnectorConfig reads the connector's file, Translate maps it,
// Translation.YAML prints it and Translation.Check loads it as walrelay run
// would.
package fromdebezium

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/replication"
)

// Translating a Debezium connector's configuration (`walrelay config
// from-debezium`): the rules below are docs/migrating-from-debezium.md's
// mapping table as code, one per Debezium key (a test holds the two
// together). Every key of the input ends up in the output: as the source of
// a walrelay key, or in the notes with the reason it maps to nothing.

// eventRouterClass is Debezium's outbox router.
const eventRouterClass = "io.debezium.transforms.outbox.EventRouter"

// ParseConnectorConfig reads a Debezium connector's configuration: JSON as
// Kafka Connect's REST API returns it ({"name": ..., "config": {...}}, or
// the config object alone), or a Java .properties file. It returns the
// connector's name ("" when the file has none) and its keys.
func ParseConnectorConfig(data []byte) (name string, cfg map[string]string, err error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		var doc map[string]any
		if err := json.Unmarshal(t, &doc); err != nil {
			return "", nil, fmt.Errorf("not valid JSON: %w", err)
		}
		obj := doc
		if c, ok := doc["config"].(map[string]any); ok {
			obj = c
			name, _ = doc["name"].(string)
		}
		cfg = map[string]string{}
		for k, v := range obj {
			switch x := v.(type) {
			case string:
				cfg[k] = x
			case nil:
				cfg[k] = ""
			case map[string]any, []any:
				return "", nil, fmt.Errorf("key %q: a connector setting is a string, not %T", k, v)
			default:
				cfg[k] = fmt.Sprint(x)
			}
		}
		if name == "" {
			name = cfg["name"]
		}
		return name, cfg, nil
	}
	cfg, err = parseProperties(data)
	return cfg["name"], cfg, err
}

// parseProperties reads Java properties: key=value, key: value or
// key value lines, # and ! comments, a trailing backslash continuing a
// line, backslash escapes.
func parseProperties(data []byte) (map[string]string, error) {
	cfg := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var logical strings.Builder
	for sc.Scan() {
		line := strings.TrimLeft(sc.Text(), " \t\f")
		if logical.Len() == 0 && (line == "" || line[0] == '#' || line[0] == '!') {
			continue
		}
		if n := len(line) - len(strings.TrimRight(line, `\`)); n%2 == 1 {
			logical.WriteString(line[:len(line)-1])
			continue
		}
		logical.WriteString(line)
		k, v := splitProperty(logical.String())
		logical.Reset()
		cfg[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(cfg) == 0 {
		return nil, errors.New("no connector settings (want JSON as Kafka Connect's REST API returns it, or a .properties file)")
	}
	return cfg, nil
}

// splitProperty splits a logical properties line at its first unescaped
// '=', ':' or white space and unescapes both parts.
func splitProperty(line string) (string, string) {
	i := 0
	for ; i < len(line); i++ {
		if line[i] == '\\' {
			i++
			continue
		}
		if strings.IndexByte("=: \t\f", line[i]) >= 0 {
			break
		}
	}
	key := line[:min(i, len(line))]
	rest := strings.TrimLeft(line[min(i, len(line)):], " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') && (i >= len(line) || line[i] == ' ' || line[i] == '\t' || line[i] == '\f' || line[i] == rest[0]) {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	return unescapeProperty(key), unescapeProperty(rest)
}

func unescapeProperty(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+4 < len(s) {
				if r, err := strconv.ParseUint(s[i+1:i+5], 16, 32); err == nil {
					b.WriteRune(rune(r))
					i += 4
					continue
				}
			}
			b.WriteByte('u')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// Translation is a connector's configuration as walrelay settings.
type Translation struct {
	// Name is the connector's name.
	Name string
	// Entries are the walrelay keys, in the order printed.
	Entries []Entry
	// Notes are the Debezium keys that set no walrelay key, each with why.
	Notes []Note
}

// Entry is one walrelay key, its value (a string, or a list) and the
// Debezium keys it comes from.
type Entry struct {
	Key     string // a setting key, as YAMLKey prints it
	Value   any    // string or []string
	Sources []string
	Comment string // more about it, or ""
}

// Note is a Debezium key (with its value) that sets no walrelay key.
type Note struct {
	Key, Value string
	// Mapped is false when walrelay cannot do what the key asks (records
	// may differ from Debezium's); true when walrelay needs no setting for
	// it (it does the same by itself, or the key does not concern the
	// records).
	Mapped bool
	Reason string
}

// debeziumRule is what one Debezium key becomes. A rule of a connector key
// has the key itself; a rule of the outbox router has its key under
// transforms.<name>.
type debeziumRule struct {
	key    string
	router bool
	// apply handles the key's value; x holds the whole configuration.
	apply func(x *translator, v string)
}

// Keys returns the Debezium keys the translation has a rule for:
// the connector's and, prefixed with "transforms.<name>.", the outbox
// router's.
func Keys() (connector, router []string) {
	for _, r := range debeziumRules() {
		if r.router {
			router = append(router, r.key)
		} else {
			connector = append(connector, r.key)
		}
	}
	return connector, router
}

// debeziumDefault are the defaults of the router's keys that matter here.
var debeziumDefault = map[string]string{
	"table.field.event.id": "id", "table.field.event.key": "aggregateid", "table.field.event.type": "type",
	"table.field.event.payload": "payload", "route.by.field": "aggregatetype",
	"route.topic.regex": "(?<routedByValue>.*)", "route.topic.replacement": "outbox.event.${routedByValue}",
}

// presetRoles are the Debezium preset's columns by walrelay role, and the
// router key that sets each.
var presetRoles = []struct{ role, routerKey, column string }{
	{"id", "table.field.event.id", "id"},
	{"aggregate_id", "table.field.event.key", "aggregateid"},
	{"event_type", "table.field.event.type", "type"},
	{"payload", "table.field.event.payload", "payload"},
	{"aggregate_type", "route.by.field", "aggregatetype"},
}

func debeziumRules() []debeziumRule {
	note := func(mapped bool, reason string) func(x *translator, v string) {
		return func(x *translator, v string) { x.note(x.key, v, mapped, reason) }
	}
	dsn := func(x *translator, v string) { x.dsnParts[x.key] = v }
	producer := func(walrelayKey string, conv func(string) (string, error), comment string) func(x *translator, v string) {
		return func(x *translator, v string) {
			w, err := conv(v)
			if err != nil {
				x.note(x.key, v, false, err.Error())
				return
			}
			x.set(walrelayKey, w, comment, x.key)
		}
	}
	routerKeyOf := func(k string) func(x *translator, v string) {
		return func(x *translator, v string) { x.router[k] = v; x.routerSrc[k] = x.key }
	}
	rules := []debeziumRule{
		{key: "connector.class", apply: func(x *translator, v string) {
			x.note(x.key, v, true, "walrelay is the Postgres connector and the outbox router in one")
		}},
		{key: "tasks.max", apply: note(true, "walrelay streams one slot with one process; run a second one as a standby")},
		{key: "name", apply: note(true, "the connector's name; walrelay has none")},
		{key: "plugin.name", apply: func(x *translator, v string) {
			if v == "" || v == "pgoutput" {
				x.note(x.key, v, true, "walrelay always decodes pgoutput")
				return
			}
			x.note(x.key, v, true, "walrelay decodes pgoutput on its own slot (walrelay cutover works with any plugin); it cannot take over this slot")
		}},
		{key: "database.hostname", apply: dsn},
		{key: "database.port", apply: dsn},
		{key: "database.user", apply: dsn},
		{key: "database.dbname", apply: dsn},
		{key: "database.sslmode", apply: dsn},
		{key: "database.sslrootcert", apply: dsn},
		{key: "database.sslcert", apply: dsn},
		{key: "database.sslkey", apply: dsn},
		{key: "database.password", apply: note(true, "a secret, not copied: give walrelay the whole DSN with the password in WALRELAY_POSTGRES_DSN or the file of postgres_dsn_file")},
		{key: "database.sslpassword", apply: note(false, "a secret, not copied: walrelay reads an unencrypted client key (sslkey in the DSN)")},
		{key: "topic.prefix", apply: note(true, "names Debezium's own topics (heartbeats, logical messages, tables the router does not route); the outbox topics come from the router's route.topic.replacement")},
		{key: "slot.name", apply: func(x *translator, v string) {
			x.set("from-slot", v, "Debezium's slot: `walrelay cutover` waits until it has confirmed walrelay's start (way A of docs/migrating-from-debezium.md); "+
				"to run on this slot instead once Debezium is stopped (way B): slot: "+v+", create_slot: false, publication: <publication.name>, create_publication: false", x.key)
		}},
		{key: "slot.drop.on.stop", apply: note(true, "walrelay never drops its slot; `walrelay cutover --drop-from-slot` drops Debezium's once it is safe")},
		{key: "publication.name", apply: note(true, "Debezium's publication; walrelay creates its own FOR TABLE publication (publication, default walrelay); for way B set publication to it with create_publication: false")},
		{key: "publication.autocreate.mode", apply: note(true, "walrelay creates its publication FOR TABLE the outbox tables when missing (create_publication)")},
		{key: "table.include.list", apply: func(x *translator, v string) {
			var tables []string
			for _, t := range strings.Split(v, ",") {
				t = strings.ReplaceAll(strings.TrimSpace(t), `\.`, ".")
				if t == "" {
					continue
				}
				if strings.ContainsAny(t, `\^$*+?()[]{}|`) {
					x.note(x.key, v, false, "a regular expression: name the outbox tables themselves (table: schema.name, comma-separated)")
					return
				}
				if _, err := replication.ParseTable(t); err != nil || !strings.Contains(t, ".") {
					x.note(x.key, v, false, fmt.Sprintf("%q is not schema.table", t))
					return
				}
				tables = append(tables, t)
			}
			x.set("table", strings.Join(tables, ","), "", x.key)
		}},
		{key: "snapshot.mode", apply: note(true, "walrelay reads the outbox inserts after its slot's start and needs no snapshot (rows before it were Debezium's to deliver)")},
		{key: "heartbeat.interval.ms", apply: producer("heartbeat-interval", msDuration, "walrelay's heartbeat is a transactional logical message; it needs no table")},
		{key: "heartbeat.action.query", apply: note(true, "walrelay's heartbeat needs no query or table")},
		{key: "message.prefix.include.list", apply: note(true, "walrelay reads only its own logical message prefixes (heartbeat, message_prefix)")},
		{key: "message.prefix.exclude.list", apply: note(true, "walrelay reads only its own logical message prefixes (heartbeat, message_prefix)")},
		{key: "max.queue.size", apply: note(true, "walrelay's backpressure is max_in_flight records awaiting Kafka acks")},
		{key: "max.batch.size", apply: note(true, "walrelay hands records to Kafka as it decodes them; batching is batching, linger, batch_max_bytes")},
		{key: "poll.interval.ms", apply: note(true, "walrelay does not poll a queue")},
		{key: "offset.flush.interval.ms", apply: note(true, "walrelay confirms its slot as soon as Kafka acknowledged (status_interval); no offsets topic")},
		{key: "tombstones.on.delete", apply: note(true, "deletes of outbox rows are not events in walrelay either (counted in walrelay_changes_ignored_total)")},
		{key: "errors.tolerance", apply: func(x *translator, v string) {
			switch v {
			case "all":
				x.set("on-poison", "dlq", "Connect skips a record it cannot convert; walrelay sends it to the dead-letter topic", x.key)
			case "", "none":
				x.set("on-poison", "stop", "Connect fails the task on a record it cannot convert; walrelay stops naming the event (dlq, the default, dead-letters it)", x.key)
			default:
				x.note(x.key, v, false, "not none or all")
			}
		}},
		{key: "errors.deadletterqueue.topic.name", apply: func(x *translator, v string) {
			x.set("dlq-topic", v, "Connect's dead-letter queue is for sink connectors; walrelay dead-letters records Kafka can never accept", x.key)
		}},
		{key: "key.converter", apply: func(x *translator, v string) { x.converters[x.key] = v }},
		{key: "value.converter", apply: func(x *translator, v string) { x.converters[x.key] = v }},
		{key: "value.converter.schemas.enable", apply: func(x *translator, v string) { x.converters[x.key] = v }},
		{key: "key.converter.schemas.enable", apply: func(x *translator, v string) { x.converters[x.key] = v }},
		{key: "header.converter", apply: func(x *translator, v string) {
			if v == "org.apache.kafka.connect.storage.SimpleHeaderConverter" {
				x.note(x.key, v, true, "walrelay's headers are the same strings")
				return
			}
			x.note(x.key, v, false, "walrelay writes headers as SimpleHeaderConverter does (strings)")
		}},
		{key: "decimal.handling.mode", apply: connectMode("precise")},
		{key: "time.precision.mode", apply: connectMode("adaptive")},
		{key: "binary.handling.mode", apply: connectMode("bytes")},
		{key: "producer.override.compression.type", apply: producer("compression", compression, "")},
		{key: "producer.override.linger.ms", apply: producer("linger", msDuration, "walrelay's adaptive batching sends a record at once when no produce round is under way, and paces rounds at least linger apart (batching: fixed is Kafka's linger)")},
		{key: "producer.override.batch.size", apply: producer("batch-max-bytes", plainInt, "")},
		{key: "producer.override.buffer.memory", apply: producer("max-buffered-bytes", plainInt, "")},
		{key: "producer.override.acks", apply: note(true, "walrelay always produces with acks=all")},
		{key: "producer.override.enable.idempotence", apply: note(true, "walrelay's producer is always idempotent")},
		{key: "transforms", apply: (*translator).transformsNote},
		{key: "type", router: true, apply: func(x *translator, v string) {
			x.note(x.key, v, true, "the outbox router: walrelay's own routing, set by its other keys")
		}},
		{key: "table.field.event.id", router: true, apply: routerKeyOf("table.field.event.id")},
		{key: "table.field.event.key", router: true, apply: routerKeyOf("table.field.event.key")},
		{key: "table.field.event.type", router: true, apply: routerKeyOf("table.field.event.type")},
		{key: "table.field.event.payload", router: true, apply: routerKeyOf("table.field.event.payload")},
		{key: "route.by.field", router: true, apply: routerKeyOf("route.by.field")},
		{key: "route.topic.regex", router: true, apply: routerKeyOf("route.topic.regex")},
		{key: "route.topic.replacement", router: true, apply: routerKeyOf("route.topic.replacement")},
		{key: "table.field.event.timestamp", router: true, apply: func(x *translator, v string) {
			if v == "" {
				x.note(x.key, v, true, "the record timestamp is the commit time (Debezium's is the time it read the change)")
				return
			}
			x.set("column-timestamp", v, "the record timestamp (walrelay's default is the commit time; Debezium's the time it read the change)", x.key)
			x.set("created-at-column", v, "the time column walrelay status, replay and prune select rows by", x.key)
		}},
		{key: "table.fields.additional.placement", router: true, apply: routerKeyOf("table.fields.additional.placement")},
		{key: "table.field.additional.missing", router: true, apply: func(x *translator, v string) {
			x.note(x.key, v, v == "" || v == "error", "walrelay requires envelope columns in the table (Debezium's error); a header column the table lacks adds no header")
		}},
		{key: "table.expand.json.payload", router: true, apply: routerKeyOf("table.expand.json.payload")},
		{key: "route.tombstone.on.empty.payload", router: true, apply: routerKeyOf("route.tombstone.on.empty.payload")},
		{key: "table.json.payload.null.behavior", router: true, apply: routerDefault("ignore", "walrelay leaves null fields out of an expanded payload, as Debezium's default ignore does")},
		{key: "table.json.payload.empty.array.behavior", router: true, apply: routerDefault("ignore", "walrelay leaves empty arrays out of an expanded payload, as Debezium's default ignore does")},
		{key: "table.op.invalid.behavior", router: true, apply: note(true, "walrelay counts updates and deletes of the outbox in walrelay_changes_ignored_total{reason}")},
		{key: "table.field.event.schema.version", router: true, apply: note(false, "a Connect schema version; walrelay writes no Connect schemas")},
	}
	return rules
}

// connectMode is the rule of a Debezium value-conversion mode: its default
// is what walrelay's envelope writes.
func connectMode(def string) func(x *translator, v string) {
	return func(x *translator, v string) {
		if v == def {
			x.note(x.key, v, true, "the default, which walrelay's envelope values follow")
			return
		}
		x.note(x.key, v, false, "walrelay's envelope writes values as Debezium's default "+def+" does")
	}
}

// routerDefault is the rule of a router key walrelay supports only at its
// default.
func routerDefault(def, reason string) func(x *translator, v string) {
	return func(x *translator, v string) {
		x.note(x.key, v, v == def, reason)
	}
}

func msDuration(v string) (string, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return "", fmt.Errorf("%q is not a number of milliseconds", v)
	}
	return (time.Duration(n) * time.Millisecond).String(), nil
}

func plainInt(v string) (string, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return "", fmt.Errorf("%q is not a whole number", v)
	}
	return strconv.FormatInt(n, 10), nil
}

func compression(v string) (string, error) {
	switch v {
	case "none", "gzip", "snappy", "lz4", "zstd":
		return v, nil
	}
	return "", fmt.Errorf("%q is not a compression walrelay has (none, gzip, snappy, lz4, zstd)", v)
}

// translator holds a translation under way.
type translator struct {
	cfg        map[string]string
	key        string            // the Debezium key being applied
	dsnParts   map[string]string // database.* keys
	converters map[string]string
	router     map[string]string // the router's keys without their prefix
	routerSrc  map[string]string // ... and their full keys
	// routerPrefix is "transforms.<name>." of the outbox router.
	routerPrefix string
	out          Translation
}

func (x *translator) set(key string, value any, comment string, sources ...string) {
	k := config.YAMLKey(key)
	for i := range x.out.Entries {
		if x.out.Entries[i].Key == k {
			x.out.Entries[i].Value = value
			x.out.Entries[i].Sources = append(x.out.Entries[i].Sources, sources...)
			return
		}
	}
	x.out.Entries = append(x.out.Entries, Entry{Key: k, Value: value, Sources: sources, Comment: comment})
}

func (x *translator) note(key, value string, mapped bool, reason string) {
	if secretKey(key) {
		value = "(not shown)"
	}
	x.out.Notes = append(x.out.Notes, Note{Key: key, Value: value, Mapped: mapped, Reason: reason})
}

// secretKey reports whether a Debezium key's value may be a secret, which
// the translation never prints.
func secretKey(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"password", "secret", "jaas.config", "credential", "token", "sslkey", "ssl.key"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// Translate turns a Debezium Postgres connector's configuration
// with the outbox router into walrelay settings. It refuses a connector of
// another class and one without the outbox router.
func Translate(name string, cfg map[string]string) (Translation, error) {
	if c := cfg["connector.class"]; c != "io.debezium.connector.postgresql.PostgresConnector" {
		return Translation{}, fmt.Errorf("connector.class is %q, not io.debezium.connector.postgresql.PostgresConnector", c)
	}
	x := &translator{cfg: cfg, dsnParts: map[string]string{}, converters: map[string]string{},
		router: map[string]string{}, routerSrc: map[string]string{}, out: Translation{Name: name}}
	// The outbox router: the transform whose type is the EventRouter.
	var routerPrefix string
	for _, t := range strings.Split(cfg["transforms"], ",") {
		t = strings.TrimSpace(t)
		if t != "" && cfg["transforms."+t+".type"] == eventRouterClass {
			if routerPrefix != "" {
				return Translation{}, errors.New("transforms: more than one outbox router (walrelay reads one outbox layout per table)")
			}
			routerPrefix = "transforms." + t + "."
		}
	}
	if routerPrefix == "" {
		return Translation{}, fmt.Errorf("transforms: no transform of type %s: walrelay replaces Debezium's outbox router, not its change events", eventRouterClass)
	}
	x.routerPrefix = routerPrefix
	byKey := map[string]debeziumRule{}
	for _, r := range debeziumRules() {
		k := r.key
		if r.router {
			k = routerPrefix + k
		}
		byKey[k] = r
	}
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		x.key = k
		v := cfg[k]
		if r, ok := byKey[k]; ok {
			r.apply(x, v)
			continue
		}
		switch {
		case strings.HasPrefix(k, "transforms.") && !strings.HasPrefix(k, routerPrefix):
			x.note(k, v, false, "another transform: walrelay applies none but its outbox routing")
		case strings.HasPrefix(k, routerPrefix+"tracing."):
			x.note(k, v, false, "Debezium's OpenTelemetry span: walrelay copies a traceparent from the headers column into the record headers")
		case strings.HasPrefix(k, routerPrefix):
			x.note(k, v, false, "an outbox router key walrelay has no equivalent for")
		case strings.HasPrefix(k, "predicates"):
			x.note(k, v, false, "predicates select records for transforms; walrelay filters events with include/exclude event and aggregate types")
		case strings.HasPrefix(k, "producer.override."):
			x.note(k, v, false, "a Kafka producer setting walrelay does not take")
		case strings.HasPrefix(k, "key.converter.") || strings.HasPrefix(k, "value.converter.") || strings.HasPrefix(k, "header.converter."):
			x.note(k, v, false, "a converter setting walrelay does not take")
		default:
			x.note(k, v, false, "no walrelay equivalent")
		}
	}
	x.postgresDSN()
	x.routerSettings()
	x.order()
	return x.out, nil
}

// transformsNote explains the transforms list.
func (x *translator) transformsNote(v string) {
	alias := strings.TrimSuffix(strings.TrimPrefix(x.routerPrefix, "transforms."), ".")
	var others []string
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" && t != alias {
			others = append(others, t)
		}
	}
	if len(others) == 0 {
		x.note(x.key, v, true, "the outbox router "+alias+" is walrelay's own routing")
		return
	}
	x.note(x.key, v, false, fmt.Sprintf("the outbox router %s is walrelay's own routing; the other transforms (%s) have no walrelay equivalent", alias, strings.Join(others, ", ")))
}

// postgresDSN sets postgres-dsn from the database.* keys, without the
// password.
func (x *translator) postgresDSN() {
	p := x.dsnParts
	if len(p) == 0 {
		return
	}
	host := p["database.hostname"]
	if port := p["database.port"]; port != "" {
		host += ":" + port
	}
	u := url.URL{Scheme: "postgres", Host: host, Path: "/" + p["database.dbname"]}
	if user := p["database.user"]; user != "" {
		u.User = url.User(user)
	}
	q := url.Values{}
	for k, param := range map[string]string{"database.sslmode": "sslmode", "database.sslrootcert": "sslrootcert",
		"database.sslcert": "sslcert", "database.sslkey": "sslkey"} {
		if v := p[k]; v != "" {
			q.Set(param, v)
		}
	}
	u.RawQuery = q.Encode()
	src := make([]string, 0, len(p))
	for k := range p {
		src = append(src, k)
	}
	sort.Strings(src)
	x.set("postgres-dsn", u.String(), "without the password: set WALRELAY_POSTGRES_DSN (or a file in postgres_dsn_file) to the DSN with it, which beats this key", src...)
}

// routerSettings sets the columns, topic, envelope and headers from the
// router's keys and the converters.
func (x *translator) routerSettings() {
	get := func(k string) string {
		if v, ok := x.router[k]; ok {
			return v
		}
		return debeziumDefault[k]
	}
	// src names the router keys, set or at their default.
	src := func(ks ...string) []string {
		var out []string
		for _, k := range ks {
			if s := x.routerSrc[k]; s != "" {
				out = append(out, s)
			} else {
				out = append(out, x.routerPrefix+k+" (default "+debeziumDefault[k]+")")
			}
		}
		return out
	}
	x.set("columns", "debezium", "Debezium's outbox table: id, aggregatetype, aggregateid, type, payload", src("table.field.event.id", "table.field.event.key",
		"table.field.event.type", "table.field.event.payload", "route.by.field")...)
	roleColumn := map[string]string{}
	for _, r := range presetRoles {
		col := get(r.routerKey)
		roleColumn[r.role] = col
		if col != r.column {
			x.set("column-"+strings.ReplaceAll(r.role, "_", "-"), col, "", x.routerSrc[r.routerKey])
		}
	}

	// Topic: route.topic.replacement with ${routedByValue}, the route.by.field value.
	regex, repl := get("route.topic.regex"), get("route.topic.replacement")
	switch {
	case regex != debeziumDefault["route.topic.regex"]:
		x.note(x.routerSrc["route.topic.regex"], regex, false, "walrelay's topic is a template of the whole value ({aggregate_type}); a regular expression over it has no equivalent")
	case strings.ContainsAny(strings.ReplaceAll(repl, "${routedByValue}", ""), `$\`):
		x.note(x.routerSrc["route.topic.replacement"], repl, false, "only ${routedByValue} has a walrelay equivalent ({aggregate_type})")
	default:
		x.set("topic", strings.ReplaceAll(repl, "${routedByValue}", "{aggregate_type}"), "the value of route.by.field ("+roleColumn["aggregate_type"]+") is walrelay's aggregate type",
			src("route.topic.replacement", "route.by.field")...)
	}

	// Placements: envelope, header, partition.
	var envelope, headers []string
	for _, p := range strings.Split(x.router["table.fields.additional.placement"], ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		parts := strings.Split(p, ":")
		if len(parts) < 2 || len(parts) > 3 {
			x.note(x.routerSrc["table.fields.additional.placement"], p, false, "not column:placement[:alias]")
			continue
		}
		col, place, alias := strings.TrimSpace(parts[0]), strings.ToLower(strings.TrimSpace(parts[1])), placementAlias(parts)
		switch place {
		case "envelope":
			envelope = append(envelope, named(col, alias))
		case "header":
			hname := alias
			if hname == "" {
				hname = col
			}
			role := map[string]string{"id": "id", "event_type": "event_type", "aggregate_type": "aggregate_type"}[hname]
			if role != "" && roleColumn[role] == col {
				x.note(x.routerSrc["table.fields.additional.placement"], p, true, "walrelay writes the "+hname+" header from the "+col+" column itself")
				continue
			}
			if role != "" || strings.HasPrefix(hname, "walrelay.") || strings.HasPrefix(hname, "ce_") {
				x.note(x.routerSrc["table.fields.additional.placement"], p, false, "the header "+hname+" is walrelay's own")
				continue
			}
			headers = append(headers, named(col, alias))
		case "partition":
			x.set("column-partition", col, "an explicit partition from the column (NULL: by key)", x.routerSrc["table.fields.additional.placement"])
		default:
			x.note(x.routerSrc["table.fields.additional.placement"], p, false, "placement "+place+" is not envelope, header or partition")
		}
	}
	placement := x.routerSrc["table.fields.additional.placement"]
	if len(headers) > 0 {
		x.set("header-columns", headers, "the column's text as the header (Debezium's header converter writes the same for text, varchar, uuid, integer, json and enum columns)", placement)
	}
	expand := get("table.expand.json.payload") == "true"
	jsonMode := len(envelope) > 0 || expand
	x.converterNotes(jsonMode)
	if jsonMode && x.jsonConverterOK() {
		if len(envelope) > 0 {
			x.set("envelope", envelope, "the record value is {\"payload\":...,<name>:<value>,...} as the router writes it through the JsonConverter (schemas.enable=false)", placement)
		}
		if expand {
			x.set("expand-json-payload", "true", "", x.routerSrc["table.expand.json.payload"])
		}
	} else if src := x.routerSrc["table.expand.json.payload"]; src != "" && !expand {
		x.note(src, x.router["table.expand.json.payload"], true, "the default: walrelay writes the payload as stored")
	}
	if src := x.routerSrc["route.tombstone.on.empty.payload"]; src != "" {
		v := x.router["route.tombstone.on.empty.payload"]
		switch {
		case len(envelope) > 0 && v == "true":
			x.note(src, v, false, `walrelay writes {"payload":null,...} for a NULL payload in an envelope (the router's default false)`)
		case len(envelope) > 0:
			x.note(src, v, true, `a NULL payload in an envelope is {"payload":null,...} in walrelay too`)
		default:
			x.note(src, v, true, "walrelay writes a tombstone for a NULL payload")
		}
	}
}

// placementAlias is the alias of column:placement[:alias], "" when none.
func placementAlias(parts []string) string {
	if len(parts) == 3 {
		return strings.TrimSpace(parts[2])
	}
	return ""
}

// named is "column" or "column:name".
func named(col, name string) string {
	if name == "" || name == col {
		return col
	}
	return col + ":" + name
}

// jsonConverter is Kafka Connect's JSON converter.
const jsonConverter = "org.apache.kafka.connect.json.JsonConverter"

// jsonConverterOK reports whether the value converter makes the JSON walrelay
// writes for an envelope or an expanded payload: the JsonConverter without
// schemas, or none named (the worker's, assumed to be that).
func (x *translator) jsonConverterOK() bool {
	c, named := x.converters["value.converter"]
	return !named || c == jsonConverter && x.converters["value.converter.schemas.enable"] == "false"
}

// converterNotes explains the converters: which values they make and
// whether walrelay writes the same.
func (x *translator) converterNotes(jsonMode bool) {
	const str = "org.apache.kafka.connect.storage.StringConverter"
	vc, named := x.converters["value.converter"]
	schemas := x.converters["value.converter.schemas.enable"]
	switch {
	case !named && jsonMode:
		x.note("value.converter", "(the worker's)", true, "not in the connector's configuration: the translation assumes the worker's is "+jsonConverter+
			" with value.converter.schemas.enable=false, the converter that writes an envelope or expanded payload as JSON")
	case !named:
		// The payload as stored: a StringConverter's bytes. The worker's converter is not known.
	case vc == str && !jsonMode:
		x.note("value.converter", vc, true, "walrelay's value is the payload text, as the StringConverter writes it")
	case vc == jsonConverter && schemas == "false" && jsonMode:
		x.note("value.converter", vc, true, "walrelay writes the JSON the JsonConverter writes without schemas")
	case vc == jsonConverter && schemas == "false":
		x.note("value.converter", vc, false, "without an envelope or table.expand.json.payload the JsonConverter writes the payload as a JSON string (\"{\\\"a\\\": 1}\"); "+
			"walrelay writes the payload as stored ({\"a\": 1}), or set expand_json_payload: true for the JSON Debezium writes with table.expand.json.payload=true")
	case vc == jsonConverter:
		x.note("value.converter", vc, false, "the JsonConverter with schemas writes {\"schema\":...,\"payload\":...}; walrelay writes no Connect schemas (a schema registry, docs/schema-registry.md, carries schemas)")
	default:
		x.note("value.converter", vc, false, "a converter walrelay does not emulate; for Avro, Protobuf or JSON Schema with a schema registry see docs/schema-registry.md")
	}
	if s, ok := x.converters["value.converter.schemas.enable"]; ok && named && vc == jsonConverter {
		x.note("value.converter.schemas.enable", s, s == "false", "see value.converter")
	} else if ok {
		x.note("value.converter.schemas.enable", s, true, "a JsonConverter setting; the value converter is not the JsonConverter")
	}
	if kc, ok := x.converters["key.converter"]; ok {
		if kc == str {
			x.note("key.converter", kc, true, "walrelay's key is the aggregate id's text, as the StringConverter writes it")
		} else {
			x.note("key.converter", kc, false, "walrelay's key is the aggregate id's text (the StringConverter's bytes); this converter writes other bytes")
		}
	}
	if s, ok := x.converters["key.converter.schemas.enable"]; ok {
		x.note("key.converter.schemas.enable", s, true, "see key.converter")
	}
}

// entryOrder is the order keys are printed in.
var entryOrder = []string{"postgres_dsn", "from_slot", "table", "columns", "column_id", "column_aggregate_type", "column_aggregate_id",
	"column_event_type", "column_payload", "column_timestamp", "created_at_column", "column_partition", "header_columns", "envelope", "expand_json_payload",
	"topic", "heartbeat_interval", "on_poison", "dlq_topic", "compression", "linger", "batch_max_bytes", "max_buffered_bytes"}

func (x *translator) order() {
	rank := func(k string) int {
		if i := slices.Index(entryOrder, k); i >= 0 {
			return i
		}
		return len(entryOrder)
	}
	sort.SliceStable(x.out.Entries, func(i, j int) bool { return rank(x.out.Entries[i].Key) < rank(x.out.Entries[j].Key) })
	for i := range x.out.Entries {
		slices.Sort(x.out.Entries[i].Sources)
		x.out.Entries[i].Sources = slices.Compact(x.out.Entries[i].Sources)
	}
	sort.SliceStable(x.out.Notes, func(i, j int) bool {
		if x.out.Notes[i].Mapped != x.out.Notes[j].Mapped {
			return x.out.Notes[i].Mapped
		}
		return x.out.Notes[i].Key < x.out.Notes[j].Key
	})
}

// TimeColumnNote is the step that gives the connector's outbox tables the
// time column walrelay status, replay and prune select rows by ("" when the
// connector names one in table.field.event.timestamp): Debezium's
// documented outbox table has no created_at.
func (t Translation) TimeColumnNote() string {
	table := "<schema.table>"
	for _, e := range t.Entries {
		switch e.Key {
		case config.YAMLKey("created-at-column"):
			return ""
		case config.YAMLKey("table"):
			if v, ok := e.Value.(string); ok && v != "" && !strings.Contains(v, ",") {
				table = v
			}
		}
	}
	return "walrelay status, replay and prune select rows by a created_at column, which Debezium's documented outbox table lacks (run relays without it): " +
		"add it once with `walrelay migrate --table " + table + "` (created_at timestamptz NOT NULL DEFAULT now(): instant on Postgres 11+, " +
		"Debezium's outbox router ignores it), or set created_at_column to a timestamp column the table has"
}

// YAML renders the translation as a walrelay configuration file: each key
// after a comment naming its Debezium keys, then the Debezium keys that set
// nothing, as comments with the reason. source names the input file.
func (t Translation) YAML(source string) string {
	var b strings.Builder
	name := ""
	if t.Name != "" {
		name = fmt.Sprintf(" %q", t.Name)
	}
	fmt.Fprintf(&b, "# walrelay configuration translated by `walrelay config from-debezium` from the Debezium connector%s (%s).\n", name, source)
	b.WriteString("# Each key names the Debezium keys it comes from; the keys that map to nothing are listed at the end.\n")
	b.WriteString("# Add the brokers (a connector's configuration has none: they are the Connect worker's bootstrap.servers)\n")
	b.WriteString("# and the DSN's password, e.g. in WALRELAY_KAFKA_BROKERS and WALRELAY_POSTGRES_DSN.\n")
	if n := t.TimeColumnNote(); n != "" {
		b.WriteString("# " + n + "\n")
	}
	for _, e := range t.Entries {
		b.WriteString("\n# from " + strings.Join(e.Sources, ", "))
		if e.Comment != "" {
			b.WriteString(": " + e.Comment)
		}
		b.WriteString("\n")
		v, err := yaml.Marshal(map[string]any{e.Key: yamlScalar(e.Value)})
		if err != nil {
			v = []byte(fmt.Sprintf("# %s: cannot be written: %v\n", e.Key, err))
		}
		b.Write(v)
	}
	b.WriteString("\n# kafka_brokers: from the Kafka Connect worker's bootstrap.servers\n")
	var notMapped, needNone []Note
	for _, n := range t.Notes {
		if n.Mapped {
			needNone = append(needNone, n)
		} else {
			notMapped = append(notMapped, n)
		}
	}
	writeNotes := func(title string, ns []Note) {
		if len(ns) == 0 {
			return
		}
		b.WriteString("\n# " + title + "\n")
		for _, n := range ns {
			fmt.Fprintf(&b, "#   %s=%s: %s\n", n.Key, oneLine(n.Value), n.Reason)
		}
	}
	writeNotes("Debezium keys walrelay needs no setting for:", needNone)
	writeNotes("Debezium keys walrelay cannot map (its records may differ from Debezium's there):", notMapped)
	return b.String()
}

// yamlScalar is v with a string that reads as a number or a boolean made
// one, so that YAML does not quote it.
func yamlScalar(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	if b, err := strconv.ParseBool(s); err == nil && (s == "true" || s == "false") {
		return b
	}
	return s
}

// oneLine keeps a value on one comment line.
func oneLine(s string) string {
	return strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(s)
}

// Check loads the translation's YAML as walrelay run's configuration file
// (with a stand-in broker and, when it has none, DSN) and reports what run
// would refuse in it.
func (t Translation) Check(yml string, dir string) error {
	f, err := os.CreateTemp(dir, "from-debezium-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(yml); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	args := []string{"--config", f.Name(), "--kafka-brokers", "kafka.invalid:9092"}
	if !slices.ContainsFunc(t.Entries, func(e Entry) bool { return e.Key == "postgres_dsn" }) {
		args = append(args, "--postgres-dsn", "postgres://localhost/postgres")
	}
	cfg := config.Defaults()
	return config.Load(config.Command{Name: "run"}, &cfg, args, func(string) string { return "" }, io.Discard)
}
