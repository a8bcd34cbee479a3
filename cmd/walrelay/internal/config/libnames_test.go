package config

import (
	"go/ast"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/internal/gosrc"
)

// libraryDirs are the library packages, from this directory: used by
// programs that embed walrelay as well as by this command.
var libraryDirs = []string{"../../../../replication", "../../../../decoder", "../../../../sink",
	"../../../../checkpoint", "../../../../relay", "../../../../operator"}

// notSettings are literals that are a setting's name and also something
// else the libraries must spell: sink.HeaderContentType, the CloudEvents
// header that the setting content-type sets.
var notSettings = map[string]bool{"content-type": true}

// TestLibrariesHoldNoSettingNames: the command owns its setting names. The
// libraries' non-test Go files hold none of them (KnownKeys: the keys of
// every command's settings, as flags, WALRELAY_ variables and --config keys
// spell them) in a string literal: their errors name the library's own
// fields (Options.KafkaBrokers) or carry a typed reference, and this package
// maps those to the settings, once. The keys of several words
// ("kafka-brokers") are looked for anywhere in a literal; those of one word
// ("slot", "topic", "table") are the libraries' words too (log keys, check
// names) and are not. Programs of package main (decoder/internal/capture) are
// not libraries.
func TestLibrariesHoldNoSettingNames(t *testing.T) {
	var multi []string
	for _, k := range KnownKeys() {
		if strings.Contains(k, "-") {
			multi = append(multi, regexp.QuoteMeta(k))
		}
	}
	if len(multi) < 50 {
		t.Fatalf("%d keys of several words: did the settings move?", len(multi))
	}
	named := regexp.MustCompile(`(^|[^a-z0-9-])(` + strings.Join(multi, "|") + `)($|[^a-z0-9-])`)
	fset := token.NewFileSet()
	walked := 0
	walkLibraries(t, fset, func(path, _ string, f *ast.File) {
		walked++
		gosrc.Strings(f, func(lit *ast.BasicLit, s string) {
			if m := named.FindStringSubmatch(s); m != nil && !notSettings[s] {
				t.Errorf("%s: %q names the setting %s", fset.Position(lit.Pos()), s, m[2])
			}
		})
	})
	if walked < 80 {
		t.Fatalf("walked %d files: did the libraries move?", walked)
	}
}

// configOf is the prefix of the Config fields a package's errors name
// without it.
var configOf = map[string]string{"replication": "replication.Config.", "sink": "sink.Config.", "schema": "schema.Config."}

// fieldRef is a field as the libraries' errors name it (fields.go): a type
// and at least one field ("sink.Config" alone is the type).
var fieldRef = regexp.MustCompile(`^(replication|sink|schema|relay|operator)\.[A-Z][A-Za-z]*(\.[A-Z][A-Za-z]*)+$`)

// TestFieldKeysAreSettings: every field the libraries' errors name is in
// fieldKeys, and every key there is a setting of some command. The fields
// are the libraries' string literals that look like one
// ("sink.Config.Brokers"), and those their errors prefix: an OptionError's
// Option (relay.Options., operator.); a SettingError's Setting and Related,
// a PrereqError's and a SecurityError's Config, settingErr's first and
// keyed's further arguments (replication.Config., sink.Config.,
// schema.Config.).
func TestFieldKeysAreSettings(t *testing.T) {
	known := map[string]bool{}
	for _, k := range KnownKeys() {
		known[k] = true
	}
	for f, keys := range fieldKeys {
		for _, k := range keys {
			if !known[k] {
				t.Errorf("fieldKeys[%q]: %q is no setting", f, k)
			}
		}
	}
	fset := token.NewFileSet()
	named := map[string]token.Pos{}
	add := func(prefix string, e ast.Expr) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s, _ := strconv.Unquote(lit.Value)
			for _, f := range strings.Split(s, ", ") {
				named[prefix+f] = lit.Pos()
			}
		}
	}
	walkLibraries(t, fset, func(_, pkg string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && fieldRef.MatchString(s) {
					named[s] = n.Pos()
				}
			case *ast.CompositeLit:
				id, _ := n.Type.(*ast.Ident)
				switch {
				case id == nil:
				case id.Name == "OptionError" && (pkg == "relay" || pkg == "operator"):
					prefix := map[string]string{"relay": "relay.Options.", "operator": "operator."}[pkg]
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Option") {
							add(prefix, kv.Value)
						}
					}
				case id.Name == "SettingError" && pkg == "replication":
					for i, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Setting") {
							add("replication.Config.", kv.Value)
						} else if i == 0 && !ok {
							add("replication.Config.", el)
						}
					}
				case (id.Name == "PrereqError" && pkg == "replication") || ((id.Name == "SettingError" || id.Name == "SecurityError") && configOf[pkg] != ""):
					prefix := configOf[pkg]
					for _, el := range n.Elts {
						kv, ok := el.(*ast.KeyValueExpr)
						switch {
						case !ok:
						case isIdent(kv.Key, "Setting"):
							add(prefix, kv.Value)
						case isIdent(kv.Key, "Config") || isIdent(kv.Key, "Related"):
							if cl, ok := kv.Value.(*ast.CompositeLit); ok {
								for _, v := range cl.Elts {
									add(prefix, v)
								}
							}
						}
					}
				}
			case *ast.CallExpr:
				// settingErr(field, ...) and keyed(err, fields...) of the
				// sink and the schema registry.
				switch prefix := configOf[pkg]; {
				case prefix == "" || pkg == "replication":
				case isIdent(n.Fun, "settingErr") && len(n.Args) > 0:
					add(prefix, n.Args[0])
				case isIdent(n.Fun, "keyed"):
					for _, a := range n.Args[1:] {
						add(prefix, a)
					}
				}
			case *ast.ValueSpec:
				if len(n.Names) == 1 && n.Names[0].Name == "credentialFields" && len(n.Values) == 1 {
					if cl, ok := n.Values[0].(*ast.CompositeLit); ok {
						for _, v := range cl.Elts {
							add(configOf[pkg], v)
						}
					}
				}
			}
			return true
		})
	})
	if len(named) < 20 {
		t.Fatalf("found %d fields in the libraries' errors: has the way they name them changed?", len(named))
	}
	for f, pos := range named {
		if _, ok := fieldKeys[f]; !ok {
			t.Errorf("%s: %s is not in fieldKeys: map it to its settings", fset.Position(pos), f)
		}
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// walkLibraries parses every Go file of the libraries, tests and programs of
// package main excluded, and hands it to fn with its path and package.
func walkLibraries(t *testing.T, fset *token.FileSet, fn func(path, pkg string, f *ast.File)) {
	t.Helper()
	gosrc.Walk(t, fset, libraryDirs, func(path string, f *ast.File) {
		if f.Name.Name != "main" {
			fn(path, f.Name.Name, f)
		}
	})
}
