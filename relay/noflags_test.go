package relay

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/internal/gosrc"
)

// cliText is what only the command may say: a flag (--name) or one of its
// environment variables (WALRELAY_NAME).
var cliText = regexp.MustCompile(`--[A-Za-z]|WALRELAY_`)

// TestLibrariesNameNoFlags: the libraries (replication, sink, decoder,
// checkpoint and this runtime) are used without walrelay's command line too,
// by a program that embeds relay.Run, so their errors and log lines say what
// to change in words and carry the fields as data (Fields); only
// cmd/walrelay names flags and environment variables. This walks every Go
// file of those directories, tests excluded, and fails on any string
// literal with a flag or an environment variable of the command in it.
//
// Not flags, and so not walked:
//   - files of package main (decoder/internal/capture is a program that
//     describes its own flags);
//   - comments (Go's -ldflags "-X ..." in relay/metrics.go names the linker's
//     flags for whoever builds walrelay).
func TestLibrariesNameNoFlags(t *testing.T) {
	fset := token.NewFileSet()
	walked := 0
	walkGo(t, fset, libraryDirs, func(f *ast.File) {
		if f.Name.Name == "main" || sayFlags[filepath.ToSlash(fset.Position(f.Pos()).Filename)] {
			return
		}
		walked++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Errorf("%s: %v", fset.Position(lit.Pos()), err)
				return true
			}
			if m := cliText.FindString(s); m != "" {
				t.Errorf("%s: %q names the command line (%s...): say it in words, and give the field as data (Fields)",
					fset.Position(lit.Pos()), s, m)
			}
			return true
		})
	})
	if walked < 30 {
		t.Fatalf("walked %d files: the library directories moved?", walked)
	}
}

// sayFlags are the library files whose advice still names the command's
// flags (the operator's prune and cutover print the commands to run next);
// they are not walked until they say it in words.
var sayFlags = map[string]bool{"../operator/prune.go": true, "../operator/cutover.go": true}

// libraryDirs are the directories of the libraries, from this one.
var libraryDirs = []string{"../replication", "../sink", "../decoder", "../checkpoint", "../operator", "."}

// walkGo parses every Go file under dirs, tests excluded, and hands it to fn.
func walkGo(t *testing.T, fset *token.FileSet, dirs []string, fn func(*ast.File)) {
	t.Helper()
	gosrc.Walk(t, fset, dirs, func(_ string, f *ast.File) { fn(f) })
}

// slotSQL is SQL that reads pg_replication_slots or drops a slot.
var slotSQL = regexp.MustCompile(`(?i)from\s+pg_replication_slots|pg_drop_replication_slot\s*\(`)

// TestOneOwnerOfSlotSQL: the replication package owns the slot's SQL
// (ReadSlot, with the columns of each Postgres version; DropSlot, with the
// name as a parameter); the runtime and the command call it. Programs of
// package main outside cmd (decoder/internal/capture, a capture tool) are not
// walked; texts that do not start with SELECT (advice to an operator that
// names the function) are not statements.
func TestOneOwnerOfSlotSQL(t *testing.T) {
	fset := token.NewFileSet()
	found := 0
	walkGo(t, fset, append([]string{"../cmd"}, libraryDirs...), func(f *ast.File) {
		if f.Name.Name == "main" && !strings.HasPrefix(fset.Position(f.Pos()).Filename, "../cmd/") {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, _ := strconv.Unquote(lit.Value)
			if !slotSQL.MatchString(s) || !strings.HasPrefix(strings.ToUpper(strings.TrimSpace(s)), "SELECT") {
				return true // not a statement: advice to an operator names the function
			}
			pos := fset.Position(lit.Pos())
			if filepath.Base(filepath.Dir(pos.Filename)) == "replication" && filepath.Base(pos.Filename) == "slot.go" {
				found++
				return true
			}
			t.Errorf("%s: %q reads or drops a slot in SQL of its own: call replication.ReadSlot or replication.DropSlot", pos, s)
			return true
		})
	})
	if found == 0 {
		t.Fatal("no slot SQL found in replication/slot.go: the walk missed it")
	}
}
