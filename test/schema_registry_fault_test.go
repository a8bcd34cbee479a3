package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/sr"
)

const srTickAvsc = `{"type":"record","name":"Tick","namespace":"wr.it","fields":[{"name":"seq","type":"long"},{"name":"pad","type":"string"}]}`

// TestSchemaRegistryOutage: the registry stops (registry.sh stop: its process exits) while
// events are written whose subjects walrelay has not resolved yet (the topic strategy with a
// topic per aggregate type: each topic's subject is registered at its first event). walrelay
// must wait and retry, never skip an event: the slot's confirmed_flush_lsn stays before the
// first transaction written during the outage and its memory stays bounded (VmRSS sampled
// every 200 ms under WALRELAY_FAULT_RSS_MB, default 100 MiB) while 20,000 events pile up
// behind it in the WAL. Once the same registry is started again (its schemas kept) every
// event arrives once, framed with its subject's schema id and decoding to its row.
func TestSchemaRegistryOutage(t *testing.T) {
	env := requireEnv(t)
	requireRegistry(t)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg := startOwnRegistry(t, env, "sr-outage", false)
	s := newScenario(t, env, "srout")
	dir := writeFiles(t, filepath.Join(t.TempDir(), "conf"), map[string]string{"tick.avsc": srTickAvsc})
	writeFiles(t, dir, map[string]string{"walrelay.yaml": fmt.Sprintf("schema_rules: [{table: %s, value: {file: %s/tick.avsc}}]\n", s.table, dir)})
	// No heartbeats: every transaction of the slot is the test's.
	p := s.startReady("--config", filepath.Join(dir, "walrelay.yaml"), "--schema-registry-url", reg.url,
		"--schema-registry-timeout", "2s", "--heartbeat-interval", "0")
	rss := startFaultRSS(t, p.cmd.Process.Pid, 200*time.Millisecond)
	boundMiB := float64(faultEnvInt(t, "WALRELAY_FAULT_RSS_MB", 100))

	// insert writes events from..to in one transaction, aggregate types cycling through
	// types, and returns the WAL insert position just before its commit.
	insert := func(types []string, from, to int) lsn {
		var pre string
		err := pgPool(t, env.pgDSN).with(ctx, func(c *pgx.Conn) error {
			return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier(strings.Split(s.table, ".")).Sanitize()+
					` (aggregate_type, aggregate_id, event_type, payload)
					SELECT ($1::text[])[1 + g % cardinality($1::text[])], 'k-' || (g % 16), 'Tick', jsonb_build_object('seq', g, 'pad', repeat('x', 200))
					FROM generate_series($2::int, $3::int) g`, types, from, to); err != nil {
					return err
				}
				return tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&pre)
			})
		})
		if err != nil {
			t.Fatalf("insert events %d..%d: %v", from, to, err)
		}
		l, err := parseLSN(pre)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	// Before: the subject of topic a0 is resolved.
	insert([]string{"a0"}, 0, 499)
	waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), time.Minute, p)
	warmRSS, _, _ := rss.peak()

	reg.stop()
	down := time.Now()
	// The first transaction needs the subject of topic a1; the rest pile up behind it.
	const total = 20000
	firstPreCommit := insert([]string{"a1", "a0"}, 500, 1499)
	for from := 1500; from < 500+total; from += 1000 {
		insert([]string{"a0", "a1", "a2", "a3", "a4"}, from, from+999)
	}
	target := currentLSN(t, env.pgDSN)
	var moved []string
	for time.Since(down) < 8*time.Second || len(moved) == 0 && !strings.Contains(p.log(), "schema registry unavailable") {
		if p.exited() {
			t.Fatalf("walrelay exited (%s) while the registry was down; it must wait\n%s", p.exitStatus(), p.tail(40))
		}
		if c := slotLSN(t, env.pgDSN, s.name); c > firstPreCommit && len(moved) < 5 {
			moved = append(moved, c.String())
		}
		if time.Since(down) > time.Minute {
			t.Fatal("walrelay logged no schema registry outage within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
	confirmed := slotLSN(t, env.pgDSN, s.name)
	downRSS, _, _ := rss.peak()
	if len(moved) > 0 {
		t.Errorf("confirmed_flush_lsn moved past %s (before the commit of the first transaction that needs the registry) while it was down: %v", firstPreCommit, moved)
	}
	t.Logf("registry down %s: %d events written behind the first that needs it, slot at %s (first blocked commit after %s), WAL end %s",
		time.Since(down).Round(100*time.Millisecond), total, confirmed, firstPreCommit, target)

	reg.start()
	up := time.Now()
	waitSlotLSN(t, env.pgDSN, s.name, target, 2*time.Minute, p)
	caughtUp := time.Since(up)

	// Every event, once, in its aggregate type's topic, framed with its subject's id.
	topics := []string{s.name + ".a0", s.name + ".a1", s.name + ".a2", s.name + ".a3", s.name + ".a4"}
	recs := consumeAll(t, env.kafka, s.name+".", topics)
	cl := srClient(t, reg.url, "", "")
	sch := avro.MustParse(srTickAvsc)
	seen := make([]int, 500+total)
	for _, topic := range topics {
		id := srSubjectID(ctx, t, cl, topic+"-value")
		for _, r := range recs[topic] {
			body := srCheckFrame(t, r.Value, id, nil, topic)
			var v struct {
				Seq int64  `avro:"seq"`
				Pad string `avro:"pad"`
			}
			if err := avro.Unmarshal(sch, body, &v); err != nil || v.Seq < 0 || v.Seq >= int64(len(seen)) || v.Pad != strings.Repeat("x", 200) {
				t.Fatalf("%s offset %d: body %x decodes to %+v, %v", topic, r.Offset, body, v, err)
			}
			seen[v.Seq]++
		}
	}
	var lost, twice []int
	for seq, n := range seen {
		switch {
		case n == 0:
			lost = append(lost, seq)
		case n > 1:
			twice = append(twice, seq)
		}
	}
	if len(lost) > 0 || len(twice) > 0 {
		t.Errorf("%d events lost (first %v), %d delivered more than once (first %v)", len(lost), lost[:min(len(lost), 10)], len(twice), twice[:min(len(twice), 10)])
	}
	rss.stop()
	peak, hwm, samples := rss.peak()
	line := fmt.Sprintf("schema registry outage: rss_warm=%.1fMiB rss_peak_registry_down=%.1fMiB rss_peak=%.1fMiB vmhwm=%.1fMiB samples=%d bound=%.0fMiB events=%d catch_up=%s test=%s",
		warmRSS, downRSS, peak, hwm, samples, boundMiB, 500+total, caughtUp.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	t.Log(line)
	if peak > boundMiB || hwm > boundMiB {
		t.Errorf("walrelay's memory exceeded the bound: %s", line)
	}
}

// TestSchemaRegistryDoctor: walrelay doctor checks the registry (one of the test's own, with
// basic auth): with the right credentials an ok line for the registry (reachable, credentials
// accepted, its global compatibility) and one per configured subject (a looked-up subject: its
// version, schema id and compatibility; a file not registered yet: run will register it); with
// a wrong password a FAIL line saying the registry refused the credentials, the password shown
// nowhere; with nothing listening at the URL a FAIL line saying it is unreachable. And walrelay
// run with a rule that looks up a subject the registry lacks stops at start, before it opens
// the slot, with one line naming the subject.
func TestSchemaRegistryDoctor(t *testing.T) {
	env := requireEnv(t)
	requireRegistry(t)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reg := startOwnRegistry(t, env, "sr-doctor", true)
	s := newScenario(t, env, "srdoc")
	looked := srCreate(ctx, t, srClient(t, reg.url, reg.user, reg.password), s.name+"-looked", srTickAvsc, sr.TypeAvro)
	dir := writeFiles(t, filepath.Join(t.TempDir(), "conf"), map[string]string{
		"tick.avsc": srTickAvsc, "wrong-password": "not-the-password\n",
	})
	writeFiles(t, dir, map[string]string{
		"walrelay.yaml": fmt.Sprintf(`schema_rules:
  - {table: %[1]s, event_type: Looked, value: {subject: %[2]q}}
  - {table: %[1]s, event_type: Filed, value: {file: %[3]s/tick.avsc}}
`, s.table, looked.Subject, dir),
		"missing.yaml": fmt.Sprintf("schema_rules: [{table: %s, value: {subject: %q}}]\n", s.table, s.name+"-missing"),
	})
	topic := s.name + ".ticks"
	args := func(cmd, config, url, passwordFile string) []string {
		a := s.runArgs("--config", filepath.Join(dir, config), "--topic", topic, "--schema-registry-url", url,
			"--schema-registry-username", reg.user, "--schema-registry-password-file", passwordFile)
		a[0] = cmd
		return a
	}
	doctor := func(url, passwordFile string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, walrelayBin, args("doctor", "walrelay.yaml", url, passwordFile)...)
		cmd.Env = childEnv(nil)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("walrelay doctor: %v", err)
		}
		t.Logf("walrelay doctor (exit %d):\n%s", code, indent(string(out)))
		if strings.Contains(string(out), reg.password) {
			t.Errorf("doctor's output shows the registry password")
		}
		return string(out), code
	}
	expect := func(out, what, pattern string) {
		t.Helper()
		if !regexp.MustCompile(`(?m)^` + pattern + `$`).MatchString(out) {
			t.Errorf("doctor: no line for %s matching %q", what, pattern)
		}
	}

	out, code := doctor(reg.url, reg.passwordFile)
	q := regexp.QuoteMeta
	expect(out, "the registry", `ok   schema-registry reachable, credentials accepted; global compatibility BACKWARD`)
	expect(out, "the looked-up subject", q(fmt.Sprintf(`ok   schema      table %s event type "Looked" value: subject %q version %d, schema id %d (avro); compatibility BACKWARD`,
		s.table, looked.Subject, looked.Version, looked.ID)))
	expect(out, "the file", q(fmt.Sprintf(`ok   schema      table %s event type "Filed" value: subject "%s-value" does not exist yet; walrelay run registers %s/tick.avsc as its first version (compatibility BACKWARD)`,
		s.table, topic, dir)))
	if code != 0 || strings.Contains(out, "FAIL") {
		t.Errorf("doctor with the right credentials: exit %d, want 0 and no FAIL line", code)
	}

	out, code = doctor(reg.url, filepath.Join(dir, "wrong-password"))
	expect(out, "refused credentials", `FAIL schema-registry not authorized: read the global compatibility: HTTP 401 Unauthorized \(check the registry credentials.*`)
	if code != 1 || strings.Contains(out, "not-the-password") {
		t.Errorf("doctor with a wrong password: exit %d (want 1), or the wrong password shown", code)
	}

	out, code = doctor("http://"+closedPort(t)+"/apis/ccompat/v7", reg.passwordFile)
	expect(out, "an unreachable registry", `FAIL schema-registry schema registry unavailable: read the global compatibility: .*connection refused.*\(check the schema registry URL and that the registry is up\).*`)
	if code != 1 {
		t.Errorf("doctor with no registry at the URL: exit %d, want 1", code)
	}

	// run: a missing subject stops it at start, on one line naming the subject.
	pr := startWalrelay(t, "srdoc-missing", filepath.Join(s.logDir, "missing.log"), args("run", "missing.yaml", reg.url, reg.passwordFile), nil)
	if !pr.waitExit(90 * time.Second) {
		t.Fatalf("walrelay run with a missing subject did not stop within 90 s\n%s", pr.tail(20))
	}
	var errs []string
	for _, m := range pr.logLines() {
		if m["level"] == "ERROR" {
			errs = append(errs, fmt.Sprint(m["msg"], ": ", m["error"]))
		}
	}
	t.Logf("walrelay run with a missing subject: %s; ERROR lines: %q", pr.exitStatus(), errs)
	if pr.exitCode() != 1 || len(errs) != 1 || !strings.Contains(errs[0], strconv.Quote(s.name+"-missing")) || strings.Contains(errs[0], "\n") {
		t.Errorf("walrelay run with a missing subject: %s, ERROR lines %q; want exit 1 and one line naming subject %q", pr.exitStatus(), errs, s.name+"-missing")
	}
	if si, err := querySlot(ctx, t, env.pgDSN, s.name); err != nil || si.exists {
		t.Errorf("slot %s exists (%v): walrelay opened it before it checked the registry", s.name, err)
	}

	// run with --on-poison=stop: a payload that does not fit stops it, naming the event and the
	// validator's message; the slot stays before the event.
	ps := startWalrelay(t, "srdoc-stop", filepath.Join(s.logDir, "stop.log"),
		append(args("run", "walrelay.yaml", reg.url, reg.passwordFile), "--on-poison", "stop"), nil)
	ps.waitReady(60 * time.Second)
	waitSlotStreaming(t, env.pgDSN, s.name, 60*time.Second, ps)
	badID, pre := newUUID(), lsn(0)
	err := pgPool(t, env.pgDSN).with(ctx, func(c *pgx.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier(strings.Split(s.table, ".")).Sanitize()+
				` (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'tick', 'k-1', 'Filed', '{"seq": "soon", "pad": ""}')`, badID); err != nil {
				return err
			}
			var text string
			if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&text); err != nil {
				return err
			}
			var err error
			pre, err = parseLSN(text)
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !ps.waitExit(60 * time.Second) {
		t.Fatalf("walrelay --on-poison=stop did not stop on a payload that does not fit its schema\n%s", ps.tail(20))
	}
	errs = nil
	for _, m := range ps.logLines() {
		if m["level"] == "ERROR" {
			errs = append(errs, fmt.Sprint(m["error"]))
		}
	}
	t.Logf("walrelay --on-poison=stop: %s; ERROR lines: %q", ps.exitStatus(), errs)
	if ps.exitCode() != 1 || len(errs) != 1 || !strings.Contains(errs[0], "id="+badID) || !strings.Contains(errs[0], "(schema_mismatch)") ||
		!strings.Contains(errs[0], `seq: "soon" is not an integer`) {
		t.Errorf("walrelay --on-poison=stop: %s, ERROR lines %q; want exit 1 and one line naming event %s, schema_mismatch and the validator's message", ps.exitStatus(), errs, badID)
	}
	if c := slotLSN(t, env.pgDSN, s.name); c > pre {
		t.Errorf("the slot is at %s, past the event that stopped walrelay (its commit after %s)", c, pre)
	}
	t.Logf("schema registry doctor test: %s", time.Since(began).Round(100*time.Millisecond))
}
