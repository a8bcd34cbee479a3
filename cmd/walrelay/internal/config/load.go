package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Settings is the configuration of one command: a pointer to one of this
// package's configuration types (Config, PruneConfig, ...) holding the
// command's defaults, for Load to fill.
type Settings interface {
	settings() []setting
	// Validate reports the first value the command refuses, as a *Error.
	Validate() error
}

// Command is what the loader needs to know of a command besides its
// settings: its name and what its -h prints.
type Command struct {
	Name  string // the words after walrelay: run, prune, dlq redrive, ...
	Usage string // -h prints it above the settings
	// Groups are the groups of settings -h lists, in the usual order; nil
	// lists them all. The command takes its other settings all the same.
	Groups []string
	// More is printed by -h below the settings, e.g. where the settings it
	// does not list are described.
	More string
}

// Groups of settings, the headings of -h, in the order -h prints them.
const (
	GroupGeneral  = "General"
	GroupPostgres = "Postgres"
	GroupTables   = "Outbox tables"
	GroupKafka    = "Kafka"
	GroupSecurity = "Kafka security"
	GroupDelivery = "Delivery"
	GroupRecords  = "Records and topics"
	GroupBatching = "Batching and flow control"
	GroupService  = "Service"
	GroupPrune    = "Prune"
	GroupCutover  = "Cutover"
	GroupReplay   = "Replay"
	GroupRedrive  = "Dead-letter redrive"
)

var groupOrder = []string{GroupGeneral, GroupPostgres, GroupTables, GroupKafka, GroupSecurity, GroupDelivery,
	GroupRecords, GroupSchema, GroupBatching, GroupService, GroupPrune, GroupCutover, GroupReplay, GroupRedrive}

// configSetting is --config, which every command takes.
func configSetting(path *string) setting {
	return setting{name: configKey, group: GroupGeneral, value: stringVal{path},
		usage: "YAML file of settings, keys as the flags with _ for - (postgres_dsn: ...); one file serves every command:\n" +
			"a key of another command's setting is ignored, a key no command has is refused"}
}

// Load fills s, which holds the command's defaults, from the YAML file named
// by --config (or WALRELAY_CONFIG), then the WALRELAY_* environment, then the
// flags in args, each over the one before; reads the secrets whose files are
// set; and validates the result with s.Validate. Only the command's own
// settings are variables and keys of it; the file may also hold keys of
// other commands' settings, and the command line flags of walrelay run's,
// which it ignores.
//
// -h prints cmd.Usage and the command's settings to help and returns
// flag.ErrHelp; a command line that does not parse is a usage error
// (IsUsage). What -h prints never comes from the environment or the file: a
// flag's default shown is the built-in one, and a secret never appears.
func Load(cmd Command, s Settings, args []string, getenv func(string) string, help io.Writer) error {
	var path string
	all := append([]setting{configSetting(&path)}, s.settings()...)
	byName := make(map[string]setting, len(all))
	fs := flag.NewFlagSet("walrelay "+cmd.Name, flag.ContinueOnError)
	// The flags set the command's configuration at once (a bad value is a
	// usage error) and are kept, to be applied again over the file and the
	// environment.
	var given []flagValue
	for _, st := range all {
		byName[st.name] = st
		if !st.yamlOnly {
			fs.Var(flagValue{Value: st.value, given: &given}, st.name, st.usage)
		}
	}
	// One command line serves every command, as one --config file does: a
	// flag of walrelay run's settings that this command lacks is parsed
	// (a bad value is still a usage error) and ignored. -h lists only the
	// command's own.
	shared := Defaults()
	for _, st := range shared.settings() {
		if _, own := byName[st.name]; !own && !st.yamlOnly {
			fs.Var(st.value, st.name, st.usage)
		}
	}
	fs.Usage = func() { printHelp(fs.Output(), cmd, fs, all) }
	if err := parseArgs(fs, args, help, s); err != nil {
		return err
	}
	if d, ok := s.(envDefaulter); ok {
		d.envDefaults(getenv)
	}
	fromFlag := false
	fs.Visit(func(f *flag.Flag) { fromFlag = fromFlag || f.Name == configKey })
	if !fromFlag {
		path = getenv(EnvName(configKey))
	}
	if path != "" {
		if err := applyYAML(path, byName); err != nil {
			return err
		}
	}
	if f, ok := s.(configFiler); ok {
		f.setConfigFile(path)
	}
	for _, st := range all[1:] {
		if v := getenv(EnvName(st.name)); v != "" && !st.yamlOnly {
			if err := st.value.Set(v); err != nil {
				return &Error{Key: st.name, Source: "env " + EnvName(st.name), Err: err}
			}
		}
	}
	for _, g := range given {
		if err := g.Value.Set(g.raw); err != nil {
			return UsageError(err) // parsed once already: cannot happen
		}
	}
	for _, st := range all {
		if st.secretOf == "" {
			continue
		}
		file, fok := st.value.(stringVal)
		secret, sok := byName[st.secretOf].value.(stringVal)
		if !fok || !sok {
			return fmt.Errorf("setting %s: not a file of a string setting", st.name) // a bug in a settings list
		}
		if err := ReadSecretFile(st.secretOf, *file.p, secret.p); err != nil {
			return err
		}
	}
	return s.Validate()
}

// argTaker is a configuration that takes one argument besides its settings
// (walrelay config from-debezium <file>): its name in messages, and what
// sets it.
type argTaker interface {
	arg() (name string, set func(string))
}

// parseArgs is ParseFlags, with the one argument of an argTaker allowed
// before, between or after the flags.
func parseArgs(fs *flag.FlagSet, args []string, help io.Writer, s Settings) error {
	at, ok := s.(argTaker)
	if !ok {
		return ParseFlags(fs, args, help)
	}
	name, set := at.arg()
	// flag stops at the first argument that is not a flag: parse up to it,
	// take it, parse the rest.
	if err := parseFlags(fs, args, help); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return UsageError(fmt.Errorf("missing %s", name))
	}
	arg := fs.Arg(0)
	if err := parseFlags(fs, fs.Args()[1:], help); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return UsageError(fmt.Errorf("unexpected argument %q (one %s)", fs.Arg(0), name))
	}
	set(arg)
	return nil
}

// envDefaulter is a configuration whose defaults depend on a variable other
// than its settings' (run's procs on GOMAXPROCS). Load applies them after
// parsing the flags, so -h shows the built-in defaults.
type envDefaulter interface {
	envDefaults(getenv func(string) string)
}

// flagValue is a setting's value on the command line: Set sets it and keeps
// the text, in the order given, to be set again later.
type flagValue struct {
	flag.Value
	given *[]flagValue
	raw   string
}

func (f flagValue) String() string {
	if f.Value == nil {
		return ""
	}
	return f.Value.String()
}

func (f flagValue) Set(s string) error {
	if err := f.Value.Set(s); err != nil {
		return err
	}
	*f.given = append(*f.given, flagValue{Value: f.Value, raw: s})
	return nil
}

func (f flagValue) IsBoolFlag() bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// applyYAML sets the settings of byName from the keys of the YAML file at
// path. A key of another command's setting is ignored (one file serves every
// command); a key no command has is an error.
func applyYAML(path string, byName map[string]setting) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return &Error{Key: configKey, Err: err}
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return &Error{Key: configKey, Source: path, Err: fmt.Errorf("not valid YAML: %w", err)}
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	known := knownSettings()
	for _, k := range keys {
		name := strings.ReplaceAll(k, "_", "-")
		st, ok := byName[name]
		switch {
		case name == configKey:
			return &Error{Key: configKey, Source: path, Err: errors.New("a config file cannot name another one (key config)")}
		case !ok && known[name].name != "":
			continue // another command's setting
		case !ok:
			return &Error{Key: configKey, Source: path, Err: unknownKey(k, known)}
		}
		if yv, ok := st.value.(yamlValue); ok {
			if err := yv.setYAML(raw[k]); err != nil {
				source := path
				var uk *unknownKeyError
				if errors.As(err, &uk) {
					if line := keyLine(b, k, uk.Key); line > 0 {
						source = fmt.Sprintf("%s line %d", path, line)
					}
				}
				return &Error{Key: st.name, Source: source, Err: err}
			}
			continue
		}
		var v string
		switch x := raw[k].(type) {
		case []any:
			parts := make([]string, len(x))
			for i, p := range x {
				parts[i] = fmt.Sprint(p)
			}
			v = strings.Join(parts, ",")
		case map[string]any:
			return &Error{Key: st.name, Source: path, Err: errors.New("is a map; give one value, or a list")}
		case nil:
			v = ""
		default:
			v = fmt.Sprint(x)
		}
		if err := st.value.Set(v); err != nil {
			return &Error{Key: st.name, Source: path, Err: err}
		}
	}
	return nil
}

// keyLine is the line of the first key named inner inside the value of the
// top-level key outer of the YAML document b (0: not found).
func keyLine(b []byte, outer, inner string) int {
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	var find func(n *yaml.Node) int
	find = func(n *yaml.Node) int {
		for i, c := range n.Content {
			if n.Kind == yaml.MappingNode && i%2 == 0 && c.Value == inner {
				return c.Line
			}
			if l := find(c); l > 0 {
				return l
			}
		}
		return 0
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == outer {
			return find(top.Content[i+1])
		}
	}
	return 0
}

// unknownKey is the error of a YAML key no command has, with the nearest
// key when one is a typo away.
func unknownKey(k string, known map[string]setting) error {
	best, dist := "", 3
	for name := range known {
		if d := editDistance(strings.ReplaceAll(k, "-", "_"), YAMLKey(name)); d < dist || d == dist && name < best {
			best, dist = name, d
		}
	}
	if best != "" {
		return fmt.Errorf("unknown key %q: no walrelay command has this setting (did you mean %s?)", k, YAMLKey(best))
	}
	return fmt.Errorf("unknown key %q: no walrelay command has this setting", k)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// everyCommand returns the configuration of every command with its
// defaults; the settings of all of them are the keys a --config file may
// hold.
func everyCommand() []Settings {
	run, prune, cutover := Defaults(), DefaultPruneConfig(), DefaultCutoverConfig()
	migrate, status, replay, redrive := DefaultMigrateConfig(), DefaultStatusConfig(), DefaultReplayConfig(), DefaultRedriveConfig()
	return []Settings{&run, &prune, &cutover, &migrate, &status, &replay, &redrive, &NoSettings{}}
}

// knownSettings are the settings of every command by key, with --config.
func knownSettings() map[string]setting {
	var path string
	known := map[string]setting{configKey: configSetting(&path)}
	for _, s := range everyCommand() {
		for _, st := range s.settings() {
			if _, ok := known[st.name]; !ok {
				known[st.name] = st
			}
		}
	}
	return known
}

// Keys returns the keys of the settings of s, --config first, in the order
// -h lists them.
func Keys(s Settings) []string {
	keys := []string{configKey}
	for _, st := range s.settings() {
		keys = append(keys, st.name)
	}
	return keys
}

// Value returns the value of the setting key of s as a flag prints it, and
// whether s has the setting.
func Value(s Settings, key string) (string, bool) {
	for _, st := range s.settings() {
		if st.name == key {
			return st.value.String(), true
		}
	}
	return "", false
}

// KnownKeys returns the keys of every command's settings, sorted: the keys a
// --config file may hold.
func KnownKeys() []string {
	known := knownSettings()
	keys := make([]string, 0, len(known))
	for k := range known {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// NoSettings is the configuration of a command that has none but --config
// (walrelay version).
type NoSettings struct{}

func (*NoSettings) settings() []setting { return nil }

// Validate accepts everything: there is nothing to refuse.
func (*NoSettings) Validate() error { return nil }

// printHelp prints what -h shows: the command's usage, then its settings
// under their group headings, then cmd.More. Defaults are the built-in ones
// (fs's DefValue, taken before anything was set).
func printHelp(w io.Writer, cmd Command, fs *flag.FlagSet, all []setting) {
	fmt.Fprint(w, cmd.Usage)
	fmt.Fprint(w, "\nSettings: a flag --name is also the environment variable WALRELAY_NAME (upper case,\n"+
		"_ for -) and the key name (_ for -) of the --config file. A flag beats the\n"+
		"environment, which beats the file.\n")
	listed := map[string]bool{}
	for _, g := range cmd.Groups {
		listed[g] = true
	}
	for _, g := range groupOrder {
		if cmd.Groups != nil && !listed[g] {
			continue
		}
		heading := false
		for _, st := range all {
			if st.group != g {
				continue
			}
			if !heading {
				fmt.Fprintf(w, "\n%s:\n", g)
				heading = true
			}
			if st.yamlOnly {
				fmt.Fprintf(w, "  %s: (in the --config file only)\n    \t%s\n", YAMLKey(st.name), st.usage)
				continue
			}
			printFlag(w, fs.Lookup(st.name), st.value)
		}
	}
	if cmd.More != "" {
		fmt.Fprintf(w, "\n%s\n", cmd.More)
	}
}

// printFlag prints one flag as flag.PrintDefaults does.
func printFlag(w io.Writer, f *flag.Flag, v flag.Value) {
	var b strings.Builder
	fmt.Fprintf(&b, "  -%s", f.Name)
	if t := typeName(v); t != "" {
		b.WriteString(" " + t)
	}
	b.WriteString("\n    \t")
	b.WriteString(strings.ReplaceAll(f.Usage, "\n", "\n    \t"))
	switch _, isString := v.(stringVal); {
	case f.DefValue == "" || f.DefValue == "false":
	case isString:
		fmt.Fprintf(&b, " (default %q)", f.DefValue)
	default:
		fmt.Fprintf(&b, " (default %s)", f.DefValue)
	}
	fmt.Fprintln(w, b.String())
}

// typeName is the word -h prints after a flag for its kind of value.
func typeName(v flag.Value) string {
	switch v.(type) {
	case boolVal:
		return ""
	case listVal:
		return "list"
	case intVal:
		return "int"
	case sizeVal:
		return "size"
	case durVal:
		return "duration"
	case ageVal:
		return "age"
	case lsnVal:
		return "lsn"
	case timeVal:
		return "time"
	case floatVal:
		return "number"
	case mapVal:
		return "column"
	}
	return "string"
}
