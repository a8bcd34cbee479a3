// Package gosrc walks the repository's Go sources for the tests that keep
// its house rules (which package may say what). Imported by tests only.
package gosrc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Walk parses every Go file under dirs, tests excluded, and hands it to fn
// with its path.
func Walk(t *testing.T, fset *token.FileSet, dirs []string, fn func(path string, f *ast.File)) {
	t.Helper()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			fn(path, f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Strings hands every string literal of f to fn, unquoted.
func Strings(f *ast.File, fn func(lit *ast.BasicLit, s string)) {
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				fn(lit, s)
			}
		}
		return true
	})
}
