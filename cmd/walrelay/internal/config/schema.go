package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/walrelay/walrelay/sink/schema"
)

// GroupSchema is the heading -h lists the schema registry settings under.
const GroupSchema = "Schema registry"

// SchemaRegistry is the schema registry encoding of walrelay run (and
// doctor): the registry's connection, and the rules that say which tables
// (and event types) are encoded with which schema. It becomes
// sink.Config.Schema (docs/schema-registry.md).
type SchemaRegistry struct {
	// Schema holds every setting but the password's file; its zero value
	// encodes nothing.
	Schema schema.Config
	// PasswordFile holds the registry password instead of
	// schema-registry-password.
	PasswordFile string
}

// schemaSettings are the settings of the schema registry encoding.
func (s *SchemaRegistry) schemaSettings() []setting {
	c := &s.Schema
	ss := []setting{
		{name: "schema-registry-url", usage: "schema registry API base URL(s), comma-separated, e.g. http://registry:8081 (Confluent, Karapace, Redpanda) or http://apicurio:8080/apis/ccompat/v7; required with schema rules",
			value: listVal{&c.URLs}},
		{name: "schema-registry-username", usage: "schema registry HTTP basic auth user (with the password)", value: stringVal{&c.Username}},
		{name: "schema-registry-password", usage: "schema registry HTTP basic auth password; prefer --schema-registry-password-file or the environment", value: stringVal{&c.Password}},
		{name: "schema-registry-password-file", usage: "file holding the schema registry password (trailing newlines ignored)", value: stringVal{&s.PasswordFile}, secretOf: "schema-registry-password"},
		{name: "schema-registry-bearer-token", usage: "schema registry bearer token (Authorization: Bearer); prefer --schema-registry-bearer-token-file", value: stringVal{&c.BearerToken}},
		{name: "schema-registry-bearer-token-file", usage: "file holding the schema registry bearer token, read again on every registry request (a sidecar may rotate it)", value: stringVal{&c.BearerTokenFile}},
		{name: "schema-registry-tls-ca-file", usage: "PEM file of the CA(s) that sign the registry's certificate (https URLs; default the system roots)", value: stringVal{&c.TLS.CAFile}},
		{name: "schema-registry-tls-cert-file", usage: "PEM client certificate for a registry that requires one (mTLS; with --schema-registry-tls-key-file)", value: stringVal{&c.TLS.CertFile}},
		{name: "schema-registry-tls-key-file", usage: "PEM private key of --schema-registry-tls-cert-file", value: stringVal{&c.TLS.KeyFile}},
		{name: "schema-registry-tls-server-name", usage: "name checked against the registry's certificate instead of the URL's host", value: stringVal{&c.TLS.ServerName}},
		{name: "schema-registry-tls-insecure-skip-verify", usage: "accept any registry certificate (tests only; logs a warning)", value: boolVal{&c.TLS.InsecureSkipVerify}},
		{name: "schema-registry-timeout", usage: "one registry request; past it the registry counts as unavailable and the event waits, retried", value: durVal{&c.Timeout}},
		{name: "schema-subject-strategy", usage: "subject name strategy of rules that set none: topic (<topic>-value, <topic>-key), record (the record's full name) or topic-record (<topic>-<record>)",
			value: stringVal{(*string)(&c.Strategy)}},
		{name: "schema-dir", usage: "directory of schema files that become rules by their names: <schema>.<table>[.<event type>]-value.avsc|.proto|.json and ...-key.<ext> (message.<...> for tableless events)",
			value: stringVal{&c.Dir}},
		{name: "schema-rules", usage: "list of {table, event_type, value: {file, format, references, subject, strategy, version, record, message}, key: {...}}: the schema of each table's (or event type's) values and keys",
			value: schemaRulesVal{&c.Rules}, yamlOnly: true},
	}
	for i := range ss {
		ss[i].group = GroupSchema
	}
	return ss
}

// schemaDefaults are the defaults of the schema settings, as -h shows them.
func schemaDefaults() SchemaRegistry {
	return SchemaRegistry{Schema: schema.Config{Timeout: schema.DefaultTimeout, Strategy: schema.StrategyTopic}}
}

// validateSchemaRules refuses a schema rule for a table walrelay does not
// read: a typo would leave the table's records unencoded.
func (c Config) validateSchemaRules() error {
	ts, err := c.tables()
	if err != nil {
		return nil // validateTables reported it
	}
	known := map[string]bool{}
	for _, t := range ts {
		known[t.name.String()] = true
	}
	for _, r := range c.Registry.Schema.Rules {
		switch {
		case r.Table == schema.MessageTable && c.MessagePrefix == "":
			return invalid("schema-rules", "a rule for table %s (tableless events), but no message-prefix is set", schema.MessageTable)
		case r.Table != schema.MessageTable && !known[r.Table]:
			return invalid("schema-rules", "a rule for table %s, which is not an outbox table walrelay reads (%s)", r.Table, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
	}
	return nil
}

// schemaError returns err, a *schema.SettingError (from the sink's Validate
// or New: a setting that cannot work, a schema file that does not parse), as
// an *Error naming the settings, and true; other errors unchanged, false.
func schemaError(err error) (error, bool) {
	var se *schema.SettingError
	if !errors.As(err, &se) {
		return err, false
	}
	return keyedError(se, se.Setting, se.Err), true
}

// The YAML form of schema.Rule, schema.Binding and schema.Reference: the
// keys are the fields' names in snake case.
type (
	schemaRuleSpec struct {
		Table     string            `yaml:"table"`
		EventType string            `yaml:"event_type"`
		Value     schemaBindingSpec `yaml:"value"`
		Key       schemaBindingSpec `yaml:"key"`
	}
	schemaBindingSpec struct {
		Format     string                `yaml:"format"`
		File       string                `yaml:"file"`
		References []schemaReferenceSpec `yaml:"references"`
		Subject    string                `yaml:"subject"`
		Strategy   string                `yaml:"strategy"`
		Version    int                   `yaml:"version"`
		Record     string                `yaml:"record"`
		Message    string                `yaml:"message"`
	}
	schemaReferenceSpec struct {
		Name    string `yaml:"name"`
		Subject string `yaml:"subject"`
		Version int    `yaml:"version"`
	}
)

func (b schemaBindingSpec) binding() schema.Binding {
	out := schema.Binding{Format: schema.Format(b.Format), File: b.File, Subject: b.Subject, Strategy: schema.Strategy(b.Strategy),
		Version: b.Version, Record: b.Record, Message: b.Message}
	for _, r := range b.References {
		out.References = append(out.References, schema.Reference(r))
	}
	return out
}

// schemaRulesVal is the YAML key schema_rules.
type schemaRulesVal struct{ p *[]schema.Rule }

func (v schemaRulesVal) String() string {
	if v.p == nil {
		return ""
	}
	parts := make([]string, len(*v.p))
	for i, r := range *v.p {
		parts[i] = r.Table
		if r.EventType != "" {
			parts[i] += "/" + r.EventType
		}
	}
	return strings.Join(parts, ",")
}

func (v schemaRulesVal) Set(string) error {
	return errors.New("is a list of rules, only in the --config file")
}

func (v schemaRulesVal) setYAML(y any) error {
	var specs []schemaRuleSpec
	if err := strictYAML(y, &specs); err != nil {
		return fmt.Errorf("must be a list of {table, event_type, value, key}, value and key each {file, format, references: [{name, subject, version}], subject, strategy, version, record, message}: %w", err)
	}
	rules := make([]schema.Rule, len(specs))
	for i, s := range specs {
		rules[i] = schema.Rule{Table: s.Table, EventType: s.EventType, Value: s.Value.binding(), Key: s.Key.binding()}
	}
	*v.p = rules
	return nil
}

// strictYAML decodes v, a value the YAML file held, into out, refusing keys
// out has no field for: such a key is an *unknownKeyError naming it and the
// nearest key out has (the YAML decoder's own message would name Go types
// and lines of a copy of v).
func strictYAML(v, out any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	err = dec.Decode(out)
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, msg := range te.Errors {
			if m := notFoundField.FindStringSubmatch(msg); m != nil {
				return &unknownKeyError{Key: m[1], Known: yamlFields(reflect.TypeOf(out))}
			}
		}
	}
	return err
}

// notFoundField is the YAML decoder's message of an unknown key.
var notFoundField = regexp.MustCompile(`field (\S+) not found in type `)

// unknownKeyError is a key inside a setting's value (tables: - topc: x)
// that no field has; Known are the keys of the value's types.
type unknownKeyError struct {
	Key   string
	Known []string
}

func (e *unknownKeyError) Error() string {
	best, dist := "", 3
	for _, k := range e.Known {
		if d := editDistance(e.Key, k); d < dist || d == dist && k < best {
			best, dist = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key %q (did you mean %s?)", e.Key, best)
	}
	return fmt.Sprintf("unknown key %q (the keys: %s)", e.Key, strings.Join(e.Known, ", "))
}

// yamlFields are the yaml keys of the struct types t holds, at any depth.
func yamlFields(t reflect.Type) []string {
	seen := map[reflect.Type]bool{}
	var out []string
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
				out = append(out, name)
			}
			walk(f.Type)
		}
	}
	walk(t)
	slices.Sort(out)
	return slices.Compact(out)
}
