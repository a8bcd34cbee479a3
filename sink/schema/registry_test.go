package schema

import (
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

const pointAvsc = `{"type":"record","name":"Point","namespace":"geo","fields":[{"name":"x","type":"long"}]}`

var outboxTarget = Target{Topic: "points", Table: "public.outbox", EventType: "Moved"}

// A registry outage while a schema is registered is retryable; once the
// registry is back the same call succeeds, and the subject has one version.
func TestRegistryOutageIsRetryable(t *testing.T) {
	reg := newFakeRegistry(t)
	file := writeFile(t, t.TempDir(), "p.avsc", pointAvsc)
	e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{File: file}})
	for _, code := range []int32{http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusTooManyRequests} {
		reg.down.Store(code)
		_, _, err := e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil)
		if !IsRetryable(err) || errors.Is(err, ErrMismatch) {
			t.Fatalf("HTTP %d: error %v, want ErrUnavailable", code, err)
		}
		wantErr(t, err, fmt.Sprintf("HTTP %d", code), `subject "points-value"`)
	}
	reg.down.Store(http.StatusNotFound) // not a registry's API: permanent, says so
	_, _, err := e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil)
	if IsRetryable(err) || errors.Is(err, ErrSubjectMissing) {
		t.Fatalf("HTTP 404 on registration: %v", err)
	}
	wantErr(t, err, "no registry API at the URL")
	reg.down.Store(0)
	val, _, err := e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil)
	if err != nil {
		t.Fatalf("after the outage: %v", err)
	}
	if v := reg.versions(t, "points-value"); !slices.Equal(v, []int{1}) {
		t.Fatalf("versions %v after retries, want [1]", v)
	}
	var got map[string]any
	if err := avro.Unmarshal(avro.MustParse(pointAvsc), val[5:], &got); err != nil || got["x"] != int64(1) {
		t.Fatalf("decoded %v, %v", got, err)
	}
	// Once resolved, the registry is not needed: an outage now changes nothing.
	reg.down.Store(http.StatusServiceUnavailable)
	if _, _, err := e.Encode(ctx(t), outboxTarget, []byte(`{"x":2}`), nil); err != nil {
		t.Fatalf("encode with a resolved schema during an outage: %v", err)
	}
}

// An unreachable registry (connection refused) is retryable too.
func TestRegistryUnreachableIsRetryable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	file := writeFile(t, t.TempDir(), "p.avsc", pointAvsc)
	e := newEncoder(t, "http://"+addr, Rule{Table: "public.outbox", Value: Binding{File: file}})
	_, _, err = e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil)
	if !IsRetryable(err) {
		t.Fatalf("error %v, want ErrUnavailable", err)
	}
	if err := e.Register(ctx(t), func(string, string) (string, bool) { return "points", true }); !IsRetryable(err) {
		t.Fatalf("Register: %v, want ErrUnavailable", err)
	}
}

// The registry is asked once per subject, never per event.
func TestSchemaIDsCached(t *testing.T) {
	reg := newFakeRegistry(t)
	if _, _, err := reg.RegisterSchema("points-value", sr.Schema{Schema: pointAvsc}); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, t.TempDir(), "p.avsc", pointAvsc)
	e := newEncoder(t, reg.URL(),
		Rule{Table: "public.outbox", Value: Binding{File: file}},
		Rule{Table: "public.other", Value: Binding{Format: FormatAvro}}) // looked up: <topic>-value, latest
	for i := range 1000 {
		for _, tgt := range []Target{outboxTarget, {Topic: "points", Table: "public.other"}} {
			if _, _, err := e.Encode(ctx(t), tgt, fmt.Appendf(nil, `{"x":%d}`, i), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := reg.requests.Load(); n != 2 {
		t.Fatalf("%d registry requests for 2000 events of two bindings, want 2 (one register, one look-up)", n)
	}
	// Another topic of a topic-strategy binding is another subject: one more.
	reg.RegisterSchema("points2-value", sr.Schema{Schema: pointAvsc})
	for range 10 {
		if _, _, err := e.Encode(ctx(t), Target{Topic: "points2", Table: "public.other"}, []byte(`{"x":1}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := reg.requests.Load(); n != 3 {
		t.Fatalf("%d registry requests, want 3", n)
	}
}

// Apicurio answers a wrong password with 401 and an empty body; sr reports
// "no response". walrelay says "not authorized" from the status, and it is
// permanent. The password shows nowhere.
func TestRegistryNotAuthorized(t *testing.T) {
	reg := newFakeRegistry(t)
	file := writeFile(t, t.TempDir(), "p.avsc", pointAvsc)
	e, err := New(Config{URLs: []string{reg.URL()}, Username: "walrelay", Password: "s3cret-pw",
		Rules: []Rule{{Table: "public.outbox", Value: Binding{File: file}}}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []int32{http.StatusUnauthorized, http.StatusForbidden} {
		reg.down.Store(code)
		_, _, err := e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil)
		if !errors.Is(err, ErrNotAuthorized) || IsRetryable(err) {
			t.Fatalf("HTTP %d: %v, want a permanent ErrNotAuthorized", code, err)
		}
		wantErr(t, err, "not authorized", fmt.Sprintf("HTTP %d %s", code, http.StatusText(int(code))))
		wantFields(t, err, "Username", "Password", "BearerTokenFile")
		if strings.Contains(err.Error(), "s3cret-pw") || strings.Contains(err.Error(), "no response") {
			t.Fatalf("error %q", err)
		}
		err = e.Register(ctx(t), func(string, string) (string, bool) { return "points", true })
		if !errors.Is(err, ErrNotAuthorized) {
			t.Fatalf("Register: %v", err)
		}
	}
	if a := reg.lastAuth.Load(); a == nil || !strings.HasPrefix(a.(string), "Basic ") {
		t.Fatalf("Authorization %v, want basic auth", a)
	}
	cfg := Config{Password: "s3cret-pw", BearerToken: "t0ken-xyz"}
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg)} {
		if strings.Contains(s, "s3cret-pw") || strings.Contains(s, "t0ken-xyz") {
			t.Fatalf("formatted config shows a secret: %s", s)
		}
	}
}

// A bearer token file is read again on every request, so it can rotate.
func TestBearerTokenFileRotates(t *testing.T) {
	reg := newFakeRegistry(t)
	reg.RegisterSchema("a-value", sr.Schema{Schema: pointAvsc})
	reg.RegisterSchema("b-value", sr.Schema{Schema: pointAvsc})
	dir := t.TempDir()
	tok := writeFile(t, dir, "token", "first\n")
	e, err := New(Config{URLs: []string{reg.URL()}, BearerTokenFile: tok,
		Rules: []Rule{{Table: "public.outbox", Value: Binding{Format: FormatAvro}}}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ topic, token string }{{"a", "first"}, {"b", "second"}} {
		writeFile(t, dir, "token", step.token+"\n")
		if _, _, err := e.Encode(ctx(t), Target{Topic: step.topic, Table: "public.outbox"}, []byte(`{"x":1}`), nil); err != nil {
			t.Fatal(err)
		}
		if got := reg.lastAuth.Load(); got != "Bearer "+step.token {
			t.Fatalf("Authorization %q, want Bearer %s", got, step.token)
		}
	}
}

// A registration the registry refuses (409, incompatible) is permanent and
// carries the registry's message; Register names the subject.
func TestRegistrationRefused(t *testing.T) {
	reg := newFakeRegistry(t)
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && r.URL.Path == "/subjects/points-value/versions" {
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(map[string]any{"error_code": 409, "message": "Schema being registered is incompatible with an earlier schema for subject \"points-value\""})
			return true
		}
		return false
	})
	file := writeFile(t, t.TempDir(), "p.avsc", pointAvsc)
	e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{File: file}})
	err := e.Register(ctx(t), func(table, eventType string) (string, bool) { return "points", table == "public.outbox" })
	if !errors.Is(err, ErrRefused) || IsRetryable(err) || errors.Is(err, ErrMismatch) {
		t.Fatalf("Register: %v, want ErrRefused", err)
	}
	wantErr(t, err, `register under subject "points-value"`, "HTTP 409", "incompatible with an earlier schema", file)
}

// Register looks up every subject known before any event and names each
// one missing, in one error; topic-bound subjects of event-dependent topics
// wait for their first event.
func TestRegisterNamesMissingSubjects(t *testing.T) {
	reg := newFakeRegistry(t)
	reg.RegisterSchema("geo.Point", sr.Schema{Schema: pointAvsc})
	e := newEncoder(t, reg.URL(),
		Rule{Table: "public.a", Value: Binding{Subject: "missing-one"}},
		Rule{Table: "public.b", Value: Binding{Record: "geo.Missing", Strategy: StrategyRecord}},
		Rule{Table: "public.c", Value: Binding{Record: "geo.Point", Strategy: StrategyRecord}},
		Rule{Table: "public.d", Value: Binding{Format: FormatAvro}}, // topic depends on the event
	)
	err := e.Register(ctx(t), func(table, _ string) (string, bool) { return "", false })
	if !errors.Is(err, ErrSubjectMissing) {
		t.Fatalf("Register: %v, want ErrSubjectMissing", err)
	}
	wantErr(t, err, `subject "missing-one"`, `subject "geo.Missing"`, "table public.a value", "table public.b value")
	if strings.Contains(err.Error(), "geo.Point") || strings.Contains(err.Error(), "public.d") {
		t.Fatalf("Register: %v names a subject that is fine or unknown yet", err)
	}
	if n := reg.count(http.MethodGet, "/subjects/geo.Point/versions/latest"); n != 1 {
		t.Fatalf("geo.Point looked up %d times, want once", n)
	}
	// After Register, the resolved subject serves events without a request.
	before := reg.requests.Load()
	if _, _, err := e.Encode(ctx(t), Target{Topic: "x", Table: "public.c"}, []byte(`{"x":1}`), nil); err != nil {
		t.Fatal(err)
	}
	if reg.requests.Load() != before {
		t.Fatal("a subject resolved by Register was asked again")
	}
}

// A look-up takes the latest version, or the one configured.
func TestLookupVersion(t *testing.T) {
	reg := newFakeRegistry(t, srfake.WithGlobalCompat(sr.CompatNone))
	v1, _, _ := reg.RegisterSchema("points-value", sr.Schema{Schema: pointAvsc})
	v2, _, _ := reg.RegisterSchema("points-value", sr.Schema{Schema: strings.Replace(pointAvsc, `"long"}`, `"long"},{"name":"y","type":"long","default":0}`, 1)})
	for _, tc := range []struct{ version, want int }{{0, v2}, {-1, v2}, {1, v1}} {
		e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{Format: FormatAvro, Version: tc.version}})
		val, _, err := e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if id, _, _ := (&sr.ConfluentHeader{}).DecodeID(val); id != tc.want {
			t.Errorf("version %d: id %d, want %d", tc.version, id, tc.want)
		}
	}
	e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{Format: FormatJSON}})
	_, _, err := e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil)
	if !errors.Is(err, ErrInvalidSchema) || errors.Is(err, ErrMismatch) {
		t.Fatalf("a JSON rule on an Avro subject: %v", err)
	}
	wantErr(t, err, "is avro, the rule expects json")
}

// Keys: a key schema encodes the aggregate id, as a JSON string or as the
// JSON object it holds; without one the key stays as it is.
func TestKeyEncoding(t *testing.T) {
	reg := newFakeRegistry(t)
	dir := t.TempDir()
	val := writeFile(t, dir, "p.avsc", pointAvsc)
	strKey := writeFile(t, dir, "k.avsc", `"string"`)
	objKey := writeFile(t, dir, "k2.avsc", `{"type":"record","name":"Key","fields":[{"name":"tenant","type":"string"},{"name":"id","type":"long"}]}`)
	e := newEncoder(t, reg.URL(),
		Rule{Table: "public.outbox", EventType: "A", Value: Binding{File: val}, Key: Binding{File: strKey}},
		Rule{Table: "public.outbox", EventType: "B", Value: Binding{File: val}, Key: Binding{File: objKey, Subject: "tenant-key"}})
	_, key, err := e.Encode(ctx(t), Target{Topic: "points", Table: "public.outbox", EventType: "A"}, []byte(`{"x":1}`), []byte("o-42"))
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := reg.GetSchema("points-key", 1)
	var s string
	if id, _, _ := (&sr.ConfluentHeader{}).DecodeID(key); id != ss.ID || avro.Unmarshal(avro.MustParse(`"string"`), key[5:], &s) != nil || s != "o-42" {
		t.Fatalf("key % x: want id %d and the string o-42", key, ss.ID)
	}
	_, key, err = e.Encode(ctx(t), Target{Topic: "points", Table: "public.outbox", EventType: "B"}, []byte(`{"x":1}`), []byte(`{"tenant":"t1","id":7}`))
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := avro.Unmarshal(avro.MustParse(`{"type":"record","name":"Key","fields":[{"name":"tenant","type":"string"},{"name":"id","type":"long"}]}`), key[5:], &k); err != nil || k["tenant"] != "t1" || k["id"] != int64(7) {
		t.Fatalf("key %v, %v", k, err)
	}
	_, _, err = e.Encode(ctx(t), Target{Topic: "points", Table: "public.outbox", EventType: "B"}, []byte(`{"x":1}`), []byte("plain"))
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("a string key for a record key schema: %v", err)
	}
	wantErr(t, err, "table public.outbox event type \"B\" key")
	// A key that does not fit is reported as the key, not as the value.
	_, _, err = e.Encode(ctx(t), Target{Topic: "points", Table: "public.outbox", EventType: "A"}, []byte(`{"x":1}`), []byte(`{"tenant":"t1"}`))
	if !errors.Is(err, ErrMismatch) || strings.Contains(err.Error(), "the value") {
		t.Fatalf("an object key for a string key schema: %v", err)
	}
	wantErr(t, err, "the key: got an object, want a string")
}

// Rules pick by table and event type: a table without rules passes
// through; an event type without a rule of a table that has some is a
// mismatch (never sent unencoded); a tombstone stays null.
func TestRuleSelection(t *testing.T) {
	reg := newFakeRegistry(t)
	file := writeFile(t, t.TempDir(), "p.avsc", pointAvsc)
	e := newEncoder(t, reg.URL(),
		Rule{Table: "public.outbox", EventType: "Moved", Value: Binding{File: file}},
		Rule{Table: MessageTable, Value: Binding{File: file}})
	val, key, err := e.Encode(ctx(t), Target{Topic: "t", Table: "public.plain"}, []byte(`not even json`), []byte("k"))
	if err != nil || string(val) != "not even json" || string(key) != "k" {
		t.Fatalf("a table without rules: %q %q %v", val, key, err)
	}
	_, _, err = e.Encode(ctx(t), Target{Topic: "t", Table: "public.outbox", EventType: "Other"}, []byte(`{"x":1}`), nil)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("an event type without a rule: %v", err)
	}
	wantErr(t, err, `none for event type "Other"`)
	val, _, err = e.Encode(ctx(t), Target{Topic: "t", Table: "public.outbox", EventType: "Moved"}, nil, []byte("k"))
	if err != nil || val != nil {
		t.Fatalf("tombstone: %q %v", val, err)
	}
	if val, _, err = e.Encode(ctx(t), Target{Topic: "t", Table: ""}, []byte(`{"x":1}`), nil); err != nil || val[0] != 0 {
		t.Fatalf("a tableless event: % x %v", val, err)
	}
}

// The subject name strategies.
func TestSubjectStrategies(t *testing.T) {
	reg := newFakeRegistry(t)
	file := writeFile(t, t.TempDir(), "p.avsc", pointAvsc)
	e := newEncoder(t, reg.URL(),
		Rule{Table: "public.a", Value: Binding{File: file}},
		Rule{Table: "public.b", Value: Binding{File: file, Strategy: StrategyRecord}},
		Rule{Table: "public.c", Value: Binding{File: file, Strategy: StrategyTopicRecord}},
		Rule{Table: "public.d", Value: Binding{File: file, Subject: "fixed"}})
	for _, table := range []string{"public.a", "public.b", "public.c", "public.d"} {
		if _, _, err := e.Encode(ctx(t), Target{Topic: "tp", Table: table}, []byte(`{"x":1}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"tp-value", "geo.Point", "tp-geo.Point", "fixed"} {
		if !reg.SubjectExists(s) {
			t.Errorf("subject %s not registered", s)
		}
	}
}

// An https registry is verified with the configured CA; an unknown CA is a
// permanent error that names the setting.
func TestRegistryTLS(t *testing.T) {
	reg := newFakeRegistry(t)
	srv := httptest.NewUnstartedServer(reg.Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := writeFile(t, dir, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	file := writeFile(t, dir, "p.avsc", pointAvsc)
	rules := []Rule{{Table: "public.outbox", Value: Binding{File: file}}}
	e, err := New(Config{URLs: []string{srv.URL}, TLS: TLSConfig{CAFile: ca}, Rules: rules}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	e, err = New(Config{URLs: []string{srv.URL}, Rules: rules}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil)
	if err == nil || IsRetryable(err) {
		t.Fatalf("without the CA: %v, want a permanent TLS error", err)
	}
	wantErr(t, err, "unknown authority", "set the registry's CA file")
	wantFields(t, err, "TLS.CAFile")
	// mTLS: a registry that requires a client certificate.
	srv2 := httptest.NewUnstartedServer(reg.Handler())
	srv2.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv2.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv2.StartTLS()
	t.Cleanup(srv2.Close)
	ca2 := writeFile(t, dir, "ca2.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv2.Certificate().Raw})))
	e, _ = New(Config{URLs: []string{srv2.URL}, TLS: TLSConfig{CAFile: ca2}, Rules: rules}, quiet)
	_, _, err = e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil)
	if err == nil || IsRetryable(err) {
		t.Fatalf("no client certificate: %v, want a permanent TLS error", err)
	}
	wantErr(t, err, "client certificate")
	wantFields(t, err, "TLS.CertFile", "TLS.KeyFile")
	certPEM, keyPEM := selfSigned(t)
	cert, key := writeFile(t, dir, "c.pem", certPEM), writeFile(t, dir, "k.pem", keyPEM)
	e, err = New(Config{URLs: []string{srv2.URL}, TLS: TLSConfig{CAFile: ca2, CertFile: cert, KeyFile: key}, Rules: rules}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Encode(ctx(t), outboxTarget, []byte(`{"x":1}`), nil); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
}

// Check reports the registry and each subject known before any event,
// registering nothing.
func TestCheck(t *testing.T) {
	reg := newFakeRegistry(t, srfake.WithGlobalCompat(sr.CompatBackward))
	reg.RegisterSchema("geo.Point", sr.Schema{Schema: pointAvsc})
	file := writeFile(t, t.TempDir(), "p.avsc", pointAvsc)
	e := newEncoder(t, reg.URL(),
		Rule{Table: "public.a", Value: Binding{Record: "geo.Point", Strategy: StrategyRecord}},
		Rule{Table: "public.b", Value: Binding{Subject: "nope"}},
		Rule{Table: "public.c", Value: Binding{File: file, Subject: "new-subject"}},
		Rule{Table: "public.d", Value: Binding{File: file, Strategy: StrategyRecord}},
		Rule{Table: "public.e", Value: Binding{Format: FormatAvro}})
	fs, err := e.Check(ctx(t), func(string, string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range fs {
		lines = append(lines, fmt.Sprintf("%v %s %s", f.OK, f.Check, f.Note))
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{
		"true schema-registry reachable, credentials accepted; global compatibility BACKWARD",
		`true schema table public.a value: subject "geo.Point" version 1, schema id 1 (avro); compatibility BACKWARD`,
		`false schema table public.b value: schema registry: subject not found: look up subject "nope" version latest: HTTP 404`,
		// A subject the registry lacks, whether its compatibility check
		// answers 404 (Confluent's registry) or true (srfake, Apicurio's);
		// its level is the global one (Apicurio answers 404 for the level
		// of a subject it lacks, even with defaultToGlobal).
		`true schema table public.c value: subject "new-subject" does not exist yet; walrelay run registers ` + file + ` as its first version (compatibility BACKWARD)`,
		`true schema table public.d value: ` + file + ` is registered as subject "geo.Point" version 1, schema id 1`,
		"true schema table public.e value: subject <topic>-value depends on the event's topic",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("findings lack %q:\n%s", want, got)
		}
	}
	if reg.SubjectExists("new-subject") {
		t.Fatal("Check registered a schema")
	}
	reg.down.Store(http.StatusUnauthorized)
	if _, err := e.Check(ctx(t), nil); !errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("Check with refused credentials: %v", err)
	}
	reg.down.Store(http.StatusNotFound) // a URL without the registry's API path
	_, err = e.Check(ctx(t), nil)
	wantErr(t, err, "no registry API at the URL", "check the URL")
}

func TestConfigValidate(t *testing.T) {
	good := Rule{Table: "public.outbox", Value: Binding{File: "x.avsc"}}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" valid
	}{
		{"valid", Config{URLs: []string{"http://r:8081"}, Rules: []Rule{good}}, ""},
		{"disabled", Config{}, ""},
		{"no url", Config{Rules: []Rule{good}}, "URLs: none given"},
		{"userinfo", Config{URLs: []string{"http://u:pw@r:8081"}, Rules: []Rule{good}}, "credentials in the URL"},
		{"scheme", Config{URLs: []string{"r:8081"}, Rules: []Rule{good}}, "not an http:// or https:// URL"},
		{"user only", Config{URLs: []string{"http://r"}, Username: "u", Rules: []Rule{good}}, "Password: a username is set"},
		{"two auths", Config{URLs: []string{"http://r"}, BearerToken: "t", BearerTokenFile: "f", Rules: []Rule{good}}, "one of basic auth"},
		{"cert only", Config{URLs: []string{"http://r"}, TLS: TLSConfig{CertFile: "c"}, Rules: []Rule{good}}, "TLS.CertFile: a client certificate"},
		{"strategy", Config{URLs: []string{"http://r"}, Strategy: "x", Rules: []Rule{good}}, `"x" is not one of topic`},
		{"no table", Config{URLs: []string{"http://r"}, Rules: []Rule{{Value: good.Value}}}, "a rule without a table"},
		{"bare table", Config{URLs: []string{"http://r"}, Rules: []Rule{{Table: "outbox", Value: good.Value}}}, "is not schema.table"},
		{"no value", Config{URLs: []string{"http://r"}, Rules: []Rule{{Table: "public.o"}}}, "no value schema"},
		{"twice", Config{URLs: []string{"http://r"}, Rules: []Rule{good, good}}, "two rules"},
		{"ext", Config{URLs: []string{"http://r"}, Rules: []Rule{{Table: "public.o", Value: Binding{File: "x.txt"}}}}, "cannot tell the format"},
		{"ext mismatch", Config{URLs: []string{"http://r"}, Rules: []Rule{{Table: "public.o", Value: Binding{File: "x.avsc", Format: FormatJSON}}}}, "is not json"},
		{"record lookup", Config{URLs: []string{"http://r"}, Rules: []Rule{{Table: "public.o", Value: Binding{Format: FormatAvro, Strategy: StrategyRecord}}}}, "needs the record's name"},
		{"subject and strategy", Config{URLs: []string{"http://r"}, Rules: []Rule{{Table: "public.o", Value: Binding{Subject: "s", Strategy: StrategyRecord}}}}, "not both"},
		{"refs without file", Config{URLs: []string{"http://r"}, Rules: []Rule{{Table: "public.o", Value: Binding{Subject: "s", References: []Reference{{"a", "b", 1}}}}}}, "references are for a schema file"},
		{"ref version", Config{URLs: []string{"http://r"}, Rules: []Rule{{Table: "public.o", Value: Binding{File: "x.avsc", References: []Reference{{"a", "b", 0}}}}}}, "a reference needs a name, a subject and a version"},
		{"message avro", Config{URLs: []string{"http://r"}, Rules: []Rule{{Table: "public.o", Value: Binding{File: "x.avsc", Format: FormatAvro, Message: "M"}}}}, "a message name is for Protobuf"},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var se *SettingError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a *SettingError with %q", tc.name, err, tc.want)
		} else if fields := se.Fields(); len(fields) == 0 || !strings.HasPrefix(fields[0], "schema.Config.") {
			t.Errorf("%s: fields %v", tc.name, fields)
		}
	}
}

// A directory of schema files becomes rules by the files' names.
func TestDirRules(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"public.outbox-value.avsc", "public.outbox-key.avsc", "public.outbox.Order.Created-value.proto", "message-value.json"} {
		writeFile(t, dir, n, "{}")
	}
	rules, err := dirRules(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rules {
		got = append(got, fmt.Sprintf("%s|%s|%s|%s", r.Table, r.EventType, strings.TrimPrefix(r.Value.File, dir+"/"), strings.TrimPrefix(r.Key.File, dir+"/")))
	}
	want := []string{"message||message-value.json|", "public.outbox||public.outbox-value.avsc|public.outbox-key.avsc",
		"public.outbox|Order.Created|public.outbox.Order.Created-value.proto|"}
	if !slices.Equal(got, want) {
		t.Fatalf("rules %v, want %v", got, want)
	}
	for _, bad := range []string{"notes.txt", "public.outbox.avsc", "outbox-value.avsc"} {
		d := t.TempDir()
		writeFile(t, d, bad, "{}")
		if _, err := dirRules(d); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	d := t.TempDir()
	writeFile(t, d, "public.o-key.avsc", "{}")
	if _, err := dirRules(d); err == nil || !strings.Contains(err.Error(), "no value schema") {
		t.Errorf("a key without a value: %v", err)
	}
}

// A broken schema file fails New, naming the file.
func TestBrokenSchemaFileFailsAtStart(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, text, want string }{
		{"a.avsc", `{"type":"record","name":"R","fields":[{"name":"x","type":"nope"}]}`, "unknown type: nope"},
		{"a.proto", `syntax = "proto3"; message M { nope x = 1; }`, "nope"},
		{"a.json", `{"type": 5}`, "JSON Schema"},
	} {
		file := writeFile(t, dir, tc.name, tc.text)
		_, err := New(Config{URLs: []string{"http://127.0.0.1:1"}, Rules: []Rule{{Table: "public.o", Value: Binding{File: file}}}}, quiet)
		var se *SettingError
		if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSchema) {
			t.Errorf("%s: %v, want a *SettingError wrapping ErrInvalidSchema", tc.name, err)
			continue
		}
		wantErr(t, err, file, tc.want)
	}
	_, err := New(Config{URLs: []string{"http://127.0.0.1:1"}, Rules: []Rule{{Table: "public.o", Value: Binding{File: dir + "/missing.avsc"}}}}, quiet)
	wantErr(t, err, "missing.avsc", "no such file")
}

// Encode, Register and Check may run at once (the pipeline, start-up and a
// doctor probe share an Encoder); -race checks the caches.
func TestConcurrentUse(t *testing.T) {
	reg := newFakeRegistry(t)
	file := writeFile(t, t.TempDir(), "p.avsc", pointAvsc)
	e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{File: file}})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				tgt := Target{Topic: fmt.Sprintf("t%d", (g+i)%4), Table: "public.outbox"}
				if _, _, err := e.Encode(ctx(t), tgt, []byte(`{"x":1}`), nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs <- e.Register(ctx(t), func(string, string) (string, bool) { return "t0", true })
	}()
	go func() { defer wg.Done(); _, err := e.Check(ctx(t), nil); errs <- err }()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if v := reg.versions(t, fmt.Sprintf("t%d-value", i)); !slices.Equal(v, []int{1}) {
			t.Fatalf("t%d-value versions %v", i, v)
		}
	}
}
