package schema

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/walrelay/walrelay/internal/fieldref"
)

// Format is a schema's language.
type Format string

// The formats, as walrelay's settings spell them.
const (
	FormatAvro     Format = "avro"
	FormatProtobuf Format = "protobuf"
	FormatJSON     Format = "json"
)

// formatOfExt maps a schema file's extension to its format.
var formatOfExt = map[string]Format{
	".avsc":  FormatAvro,
	".proto": FormatProtobuf,
	".json":  FormatJSON,
}

// Strategy derives a subject name, as Confluent's serializers do.
type Strategy string

// The subject name strategies.
const (
	// StrategyTopic: "<topic>-value" for values, "<topic>-key" for keys
	// (Confluent's TopicNameStrategy, the default).
	StrategyTopic Strategy = "topic"
	// StrategyRecord: the record's full name (RecordNameStrategy): the Avro
	// schema's full name, the Protobuf message's full name, the JSON
	// Schema's "title".
	StrategyRecord Strategy = "record"
	// StrategyTopicRecord: "<topic>-<record full name>"
	// (TopicRecordNameStrategy).
	StrategyTopicRecord Strategy = "topic-record"
)

// MessageTable is Rule.Table for tableless events (pg_logical_emit_message),
// whose decoder.Event.Table is "".
const MessageTable = "message"

// Config configures the encoding. The zero value encodes nothing.
type Config struct {
	// URLs are the registry's API base URLs (several: tried in order on a
	// network error), e.g. http://registry:8081 for Confluent's, or
	// http://apicurio:8080/apis/ccompat/v7 for Apicurio's compatible API.
	// Credentials belong in Username/Password or BearerToken, never in the
	// URL. Required when any rule is set.
	URLs []string
	// Username and Password authenticate with HTTP basic auth. Both or
	// neither.
	Username string
	Password string
	// BearerToken is sent as "Authorization: Bearer <token>".
	// BearerTokenFile holds the token instead and is read again on every
	// registry request, so a sidecar can rotate it. At most one of basic
	// auth, BearerToken and BearerTokenFile.
	BearerToken     string
	BearerTokenFile string
	// TLS secures https URLs; the zero value verifies the registry with the
	// system's roots.
	TLS TLSConfig
	// Timeout bounds one registry request; past it the registry counts as
	// unavailable (retried). Default 10s.
	Timeout time.Duration
	// Strategy is the subject name strategy of bindings that set none.
	// Default StrategyTopic.
	Strategy Strategy
	// Dir is a directory of schema files that become rules by their names:
	// "<schema>.<table>[.<event type>]-value.<ext>" and "...-key.<ext>"
	// ("message" instead of "<schema>.<table>" for tableless events), ext
	// one of .avsc, .proto, .json. Each is registered at start under its
	// subject (Strategy). Other files in Dir are refused.
	Dir string
	// Rules choose the schemas; a rule in Rules and a file in Dir for the
	// same table, event type and role are refused.
	Rules []Rule
}

// TLSConfig secures the connections to an https registry. The fields are
// those of the Kafka TLS settings (sink.TLSConfig).
type TLSConfig struct {
	// CAFile is a PEM file of the certificates that sign the registry's
	// certificate (instead of the system roots).
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and its key, for
	// a registry that requires client certificates (mTLS). Both or neither.
	CertFile string
	KeyFile  string
	// ServerName is checked against the registry's certificate instead of
	// the URL's host.
	ServerName string
	// InsecureSkipVerify accepts any certificate. For tests only; New logs a
	// warning.
	InsecureSkipVerify bool
}

// Rule encodes the events of one table, or of one event type of it.
type Rule struct {
	// Table is "schema.table" as walrelay names outbox tables
	// (decoder.Event.Table), or MessageTable for tableless events.
	Table string
	// EventType, when set, limits the rule to events of that type; a rule
	// without one covers the table's other event types. An event of a table
	// that has rules but none for its type is a mismatch: it is never sent
	// unencoded to consumers that expect the wire format.
	EventType string
	// Value is the payload's schema. Required.
	Value Binding
	// Key, when set, encodes the key (the aggregate id) too; otherwise the
	// key stays the aggregate id's bytes. The key's JSON is the aggregate
	// id's text as a JSON string, or that text itself when it is a JSON
	// object or array.
	Key Binding
}

// Binding names one schema: a file registered at start, or a schema looked
// up in the registry by subject and version.
type Binding struct {
	// Format is the schema's format. Taken from File's extension when
	// empty (.avsc, .proto, .json); for a look-up, the registered schema's
	// type must match it when set.
	Format Format
	// File is a schema file registered at start (idempotent: the registry
	// answers the existing id when the text is already registered). Without
	// it the schema is looked up.
	File string
	// References are schemas File uses that are already in the registry
	// (Avro named types, Protobuf imports, JSON Schema $refs): Name as the
	// file refers to it, and its Subject and Version.
	References []Reference
	// Subject overrides the strategy's subject.
	Subject string
	// Strategy derives the subject when Subject is empty; default
	// Config.Strategy.
	Strategy Strategy
	// Version is the version looked up when File is empty; 0 (or -1) is the
	// latest at the first use, kept until restart.
	Version int
	// Record is the record's full name for the record strategies when File
	// is empty (the name is otherwise read from the file).
	Record string
	// Message is the Protobuf message's full name (package.Name or
	// package.Outer.Inner); default the file's first message.
	Message string
}

// Reference is a schema that another one uses.
type Reference struct {
	Name    string
	Subject string
	Version int
}

// set reports whether b names a schema.
func (b Binding) set() bool {
	return b.Format != "" || b.File != "" || b.Subject != "" || b.Record != "" || len(b.References) > 0 || b.Message != "" || b.Version != 0
}

// Enabled reports whether c encodes anything.
func (c Config) Enabled() bool { return len(c.Rules) > 0 || c.Dir != "" }

// String shows c with the password and bearer token masked, so that a
// configuration printed with %v does not reveal them.
func (c Config) String() string {
	mask := func(s string) string {
		if s == "" {
			return ""
		}
		return "xxxxx"
	}
	return fmt.Sprintf("{URLs:%v Username:%s Password:%s BearerToken:%s BearerTokenFile:%s TLS:%+v Timeout:%v Strategy:%s Dir:%s Rules:%+v}",
		c.URLs, c.Username, mask(c.Password), mask(c.BearerToken), c.BearerTokenFile, c.TLS, c.Timeout, c.Strategy, c.Dir, c.Rules)
}

// LogValue masks the secrets in log attributes.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// SettingError is a Config value that cannot work. Setting is its field
// ("URLs", "TLS.CAFile", "Rules", "Dir"), Related other fields involved;
// Err says why, in words.
type SettingError struct {
	Setting string
	Related []string
	Err     error
}

func (e *SettingError) Error() string { return e.Setting + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Fields returns the fields to change, Setting's first, as
// schema.Config.<field>.
func (e *SettingError) Fields() []string {
	return configFields(append([]string{e.Setting}, e.Related...)...)
}

// configFields returns the fields of Config as schema.Config.<field>.
func configFields(names ...string) []string { return fieldref.Of("schema.Config", names...) }

func settingErr(setting, format string, a ...any) error {
	return &SettingError{Setting: setting, Err: fmt.Errorf(format, a...)}
}

// Validate reports a configuration that cannot work as a *SettingError. It
// reads no file (New does).
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if len(c.URLs) == 0 {
		return settingErr("URLs", "none given: schema rules need the registry's URL")
	}
	for _, u := range c.URLs {
		if err := validateURL(u); err != nil {
			return err
		}
	}
	if (c.Username == "") != (c.Password == "") {
		if c.Username == "" {
			return settingErr("Username", "a password is set without a username")
		}
		return settingErr("Password", "a username is set without a password: set the registry password")
	}
	auths := 0
	for _, set := range []bool{c.Username != "", c.BearerToken != "", c.BearerTokenFile != ""} {
		if set {
			auths++
		}
	}
	if auths > 1 {
		return settingErr("BearerToken", "use one of basic auth, a bearer token and a bearer token file")
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return settingErr("TLS.CertFile", "a client certificate and its key go together (set both or neither)")
	}
	if c.Timeout < 0 {
		return settingErr("Timeout", "%v is negative", c.Timeout)
	}
	if err := c.Strategy.validate("Strategy"); err != nil {
		return err
	}
	seen := map[ruleKey]bool{}
	for _, r := range c.Rules {
		if err := r.validate(c.Strategy); err != nil {
			return err
		}
		k := ruleKey{r.Table, r.EventType}
		if seen[k] {
			return settingErr("Rules", "%s: two rules", k)
		}
		seen[k] = true
	}
	return nil
}

func validateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return settingErr("URLs", "not a URL: %w", err)
	}
	if u.User != nil {
		// The sr client puts the URL in its errors.
		return &SettingError{Setting: "URLs", Related: []string{"Username", "Password"},
			Err: fmt.Errorf("%s://%s: credentials in the URL would show in errors: set the registry username and password instead", u.Scheme, u.Host)}
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return settingErr("URLs", "%q is not an http:// or https:// URL", raw)
	}
	return nil
}

func (s Strategy) validate(setting string) error {
	switch s {
	case "", StrategyTopic, StrategyRecord, StrategyTopicRecord:
		return nil
	}
	return settingErr(setting, "%q is not one of topic, record, topic-record", s)
}

// ruleKey identifies a rule: its table and event type ("" for all).
type ruleKey struct{ table, eventType string }

func (k ruleKey) String() string {
	if k.eventType == "" {
		return "table " + k.table
	}
	return fmt.Sprintf("table %s event type %q", k.table, k.eventType)
}

func (r Rule) validate(def Strategy) error {
	k := ruleKey{r.Table, r.EventType}
	if r.Table == "" {
		return settingErr("Rules", "a rule without a table (use %q for tableless events)", MessageTable)
	}
	if r.Table != MessageTable && !strings.Contains(r.Table, ".") {
		return settingErr("Rules", "table %q is not schema.table", r.Table)
	}
	if !r.Value.set() {
		return settingErr("Rules", "%s: no value schema", k)
	}
	if err := r.Value.validate(k, "value", def); err != nil {
		return err
	}
	if r.Key.set() {
		return r.Key.validate(k, "key", def)
	}
	return nil
}

func (b Binding) validate(k ruleKey, role string, def Strategy) error {
	fail := func(format string, a ...any) error {
		return settingErr("Rules", "%s %s: %s", k, role, fmt.Sprintf(format, a...))
	}
	switch b.Format {
	case "", FormatAvro, FormatProtobuf, FormatJSON:
	default:
		return fail("format %q is not one of avro, protobuf, json", b.Format)
	}
	if err := b.Strategy.validate("Rules"); err != nil {
		return fail("%v", err)
	}
	strategy := b.strategy(def)
	switch {
	case b.File != "":
		f, ok := formatOfExt[filepath.Ext(b.File)]
		switch {
		case !ok && b.Format == "":
			return fail("cannot tell the format of %s (name it .avsc, .proto or .json, or set the format)", b.File)
		case ok && b.Format != "" && f != b.Format:
			return fail("%s is not %s", b.File, b.Format)
		}
		if b.Version > 0 {
			return fail("a version is only for schemas looked up (without a file)")
		}
		if b.Record != "" {
			return fail("the record name is read from %s", b.File)
		}
	case len(b.References) > 0:
		return fail("references are for a schema file")
	case b.Subject == "" && strategy != StrategyTopic && b.Record == "":
		return fail("the %s strategy needs the record's name to look the schema up (set the record name, a subject or a file)", strategy)
	}
	if b.Subject != "" && b.Strategy != "" {
		return fail("set a subject or a strategy, not both")
	}
	if b.Version < -1 {
		return fail("version %d is not a version (0 or -1 is the latest)", b.Version)
	}
	if b.Message != "" && b.Format != "" && b.Format != FormatProtobuf {
		return fail("a message name is for Protobuf schemas")
	}
	for _, r := range b.References {
		if r.Name == "" || r.Subject == "" || r.Version < 1 {
			return fail("a reference needs a name, a subject and a version")
		}
	}
	return nil
}

func (b Binding) strategy(def Strategy) Strategy {
	switch {
	case b.Strategy != "":
		return b.Strategy
	case def != "":
		return def
	}
	return StrategyTopic
}

// dirRules turns the files of dir into rules (see Config.Dir).
func dirRules(dir string) ([]Rule, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, settingErr("Dir", "%w", err)
	}
	byKey := map[ruleKey]*Rule{}
	var keys []ruleKey
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		name := e.Name()
		ext := filepath.Ext(name)
		if _, ok := formatOfExt[ext]; !ok {
			return nil, settingErr("Dir", "%s: not a schema file (.avsc, .proto or .json)", name)
		}
		base := strings.TrimSuffix(name, ext)
		role := "value"
		switch {
		case strings.HasSuffix(base, "-value"):
			base = strings.TrimSuffix(base, "-value")
		case strings.HasSuffix(base, "-key"):
			base, role = strings.TrimSuffix(base, "-key"), "key"
		default:
			return nil, settingErr("Dir", "%s: the name must end in -value%s or -key%s", name, ext, ext)
		}
		var k ruleKey
		if rest, ok := strings.CutPrefix(base, MessageTable); ok && (rest == "" || rest[0] == '.') {
			k = ruleKey{MessageTable, strings.TrimPrefix(rest, ".")}
		} else {
			parts := strings.SplitN(base, ".", 3)
			if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
				return nil, settingErr("Dir", "%s: the name must start with schema.table (or %s)", name, MessageTable)
			}
			k = ruleKey{parts[0] + "." + parts[1], ""}
			if len(parts) == 3 {
				k.eventType = parts[2]
			}
		}
		r := byKey[k]
		if r == nil {
			r = &Rule{Table: k.table, EventType: k.eventType}
			byKey[k] = r
			keys = append(keys, k)
		}
		b := &r.Value
		if role == "key" {
			b = &r.Key
		}
		if b.File != "" {
			return nil, settingErr("Dir", "%s and %s: two %s schemas for %s", filepath.Base(b.File), name, role, k)
		}
		b.File = filepath.Join(dir, name)
	}
	slices.SortFunc(keys, func(a, b ruleKey) int { return strings.Compare(a.String(), b.String()) })
	rules := make([]Rule, 0, len(keys))
	for _, k := range keys {
		if !byKey[k].Value.set() {
			return nil, settingErr("Dir", "%s has a key schema but no value schema", k)
		}
		rules = append(rules, *byKey[k])
	}
	return rules, nil
}

// allRules returns c.Rules and the rules of c.Dir, refusing a table, event
// type and role given twice.
func (c Config) allRules() ([]Rule, error) {
	rules := slices.Clone(c.Rules)
	if c.Dir == "" {
		return rules, nil
	}
	fromDir, err := dirRules(c.Dir)
	if err != nil {
		return nil, err
	}
	for _, d := range fromDir {
		k := ruleKey{d.Table, d.EventType}
		for _, r := range c.Rules {
			if (ruleKey{r.Table, r.EventType}) == k {
				return nil, settingErr("Dir", "%s has a rule and a file in %s", k, c.Dir)
			}
		}
		if err := d.validate(c.Strategy); err != nil {
			return nil, err
		}
		rules = append(rules, d)
	}
	if len(rules) == 0 {
		return nil, settingErr("Dir", "no schema files in %s", c.Dir)
	}
	return rules, nil
}
