package replication

import (
	"context"
	"crypto/tls"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestOnePostgresConnector: no code of walrelay's (the command and every
// library; test programs aside) opens a Postgres connection with pgconn or
// pgx itself. Each goes through ConnectConfig or ConnectPgx in password.go,
// so that a PasswordSource (a short-lived token) is asked for every one; a
// new call site that bypasses them fails here.
func TestOnePostgresConnector(t *testing.T) {
	connectors := map[string]map[string]bool{
		"github.com/jackc/pgx/v5/pgconn":  {"Connect": true, "ConnectConfig": true, "ConnectWithOptions": true},
		"github.com/jackc/pgx/v5":         {"Connect": true, "ConnectConfig": true, "ConnectWithOptions": true},
		"github.com/jackc/pgx/v5/pgxpool": {"New": true, "NewWithConfig": true},
		"github.com/jackc/pgx/v5/stdlib":  {"OpenDB": true, "GetConnector": true},
	}
	skip := map[string]bool{"../test": true, "../decoder/internal/capture": true, "../.git": true}
	fset := token.NewFileSet()
	found := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[path] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		names := map[string]map[string]bool{} // local import name -> connect functions
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			fns, ok := connectors[p]
			if !ok {
				continue
			}
			name := filepath.Base(p)
			if p == "github.com/jackc/pgx/v5" {
				name = "pgx"
			}
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = fns
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok || !names[id.Name][sel.Sel.Name] {
				return true
			}
			pos := fset.Position(sel.Pos())
			if filepath.Base(filepath.Dir(pos.Filename)) == "replication" && filepath.Base(pos.Filename) == "password.go" {
				found++
				return true
			}
			t.Errorf("%s: %s.%s opens a Postgres connection past the password source: use replication.ConnectConfig, ConnectPgx, Connect or OpenPgx", pos, id.Name, sel.Sel.Name)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no connect call found in replication/password.go: the walk missed it")
	}
}

type askedSource struct {
	mu    sync.Mutex
	asked []string
	err   error
}

func (s *askedSource) Password(_ context.Context, host string, port uint16, user string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, host+":"+strconv.Itoa(int(port))+"/"+user)
	return "tok-" + strconv.Itoa(len(s.asked)), s.err
}

// TestPerHostPasswords: each host of a DSN gets a password of its own, asked
// just before it is tried, in libpq's order; a host reached without TLS is
// skipped unless it is local (a token never travels in clear text, but a
// password file's password goes where the DSN's would); a refusal another
// host would repeat stops the tries, as pgconn does.
func TestPerHostPasswords(t *testing.T) {
	tlsOn := &tls.Config{}
	pc := &pgconn.Config{Host: "db1.example", Port: 5432, User: "relay", TLSConfig: tlsOn, Fallbacks: []*pgconn.FallbackConfig{
		{Host: "db1.example", Port: 5432}, // sslmode=prefer's plain-text retry
		{Host: "db2.example", Port: 5433, TLSConfig: tlsOn},
		{Host: "127.0.0.1", Port: 5434},
	}}
	refused := errors.New("refused")
	dialAll := func(src PasswordSource, fail func(host string) error) (got []string, err error) {
		_, err = perHost(context.Background(), pc, src, func(h *pgconn.FallbackConfig, pw string) (int, error) {
			got = append(got, h.Host+"="+pw)
			return 0, fail(h.Host)
		})
		return got, err
	}
	t.Run("token", func(t *testing.T) {
		src := &askedSource{}
		got, err := dialAll(src, func(string) error { return refused })
		if want := "db1.example=tok-1 db2.example=tok-2 127.0.0.1=tok-3"; strings.Join(got, " ") != want || !errors.Is(err, refused) {
			t.Errorf("tried %q (%v), want %q", strings.Join(got, " "), err, want)
		}
		if want := "db1.example:5432/relay db2.example:5433/relay 127.0.0.1:5434/relay"; strings.Join(src.asked, " ") != want {
			t.Errorf("asked for %q, want %q", strings.Join(src.asked, " "), want)
		}
	})
	t.Run("first that connects", func(t *testing.T) {
		got, err := dialAll(&askedSource{}, func(h string) error {
			if h == "db2.example" {
				return nil
			}
			return refused
		})
		if want := "db1.example=tok-1 db2.example=tok-2"; strings.Join(got, " ") != want || err != nil {
			t.Errorf("tried %q (%v), want %q", strings.Join(got, " "), err, want)
		}
	})
	t.Run("wrong password stops", func(t *testing.T) {
		got, err := dialAll(&askedSource{}, func(string) error { return &pgconn.PgError{Code: "28P01"} })
		if want := "db1.example=tok-1"; strings.Join(got, " ") != want || err == nil {
			t.Errorf("tried %q (%v), want %q", strings.Join(got, " "), err, want)
		}
	})
	t.Run("source fails", func(t *testing.T) {
		got, err := dialAll(&askedSource{err: errors.New("no credentials")}, func(string) error { return nil })
		var pe *PasswordError
		if len(got) != 0 || !errors.As(err, &pe) {
			t.Errorf("tried %q (%v), want no try and a *PasswordError", strings.Join(got, " "), err)
		}
	})
	t.Run("password file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "pw")
		if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		got, _ := dialAll(PasswordFile(path), func(string) error { return refused })
		if want := "db1.example=s3cret db1.example=s3cret db2.example=s3cret 127.0.0.1=s3cret"; strings.Join(got, " ") != want {
			t.Errorf("tried %q, want %q", strings.Join(got, " "), want)
		}
	})
	t.Run("no TLS host", func(t *testing.T) {
		plain := &pgconn.Config{Host: "db.example", Port: 5432}
		_, err := perHost(context.Background(), plain, &askedSource{}, func(*pgconn.FallbackConfig, string) (int, error) { return 0, nil })
		var se *SettingError
		if !errors.As(err, &se) || se.Setting != "DSN" || TLSReachable(plain) {
			t.Errorf("a DSN without TLS: %v, want a postgres-dsn *SettingError", err)
		}
	})
}

// TestPasswordFileReadEachTime: the file is read for every connection, so
// a sidecar's new password is used by the next one; a named pipe hands
// each reader the password written for it.
func TestPasswordFileReadEachTime(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pw")
	src := PasswordFile(path)
	for _, want := range []string{"first", "second"} {
		if err := os.WriteFile(path, []byte(want+"\r\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := src.Password(context.Background(), "h", 1, "u"); got != want || err != nil {
			t.Fatalf("Password() = %q, %v; want %q", got, err, want)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	next := make(chan string)
	go func() {
		for pw := range next { // one writer per read: the reader has closed the pipe before the next opens it
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			_, _ = f.WriteString(pw + "\n")
			_ = f.Close()
		}
	}()
	defer close(next)
	for _, want := range []string{"one", "two"} {
		next <- want
		if got, err := PasswordFile(fifo).Password(context.Background(), "h", 1, "u"); got != want || err != nil {
			t.Fatalf("Password() from a pipe = %q, %v; want %q", got, err, want)
		}
	}
}
