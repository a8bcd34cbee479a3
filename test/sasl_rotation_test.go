package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// watchOpens counts the opens of the file named name in dir (inotify), until
// the test ends.
func watchOpens(t *testing.T, dir, name string) *atomic.Int64 {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		t.Skipf("no inotify here: %v", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			k, err := syscall.Read(fd, buf)
			if err != nil || k <= 0 {
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= k; {
				nameLen := int(binary.NativeEndian.Uint32(buf[off+12 : off+16]))
				evName := string(bytes.TrimRight(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+nameLen], "\x00"))
				if evName == name {
					n.Add(1)
				}
				off += syscall.SizeofInotifyEvent + nameLen
			}
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Close(fd) // ends the read
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
	return &n
}

// TestSASLCredentialRotation: a SCRAM password that expires every few
// seconds (rotated at the broker, then in walrelay's --sasl-password-file)
// keeps walrelay's SASL sessions to the real broker alive: the broker makes
// every session re-authenticate every 5 s (connections.max.reauth.ms, set by
// test/env/kafka.sh), walrelay reads the file again for each
// authentication and so always presents the current password, and every
// event is delivered with no restart and no error. It stands in for
// AWS_MSK_IAM, which the test broker cannot do and whose credentials come
// from the AWS chain through the same per-authentication callback (its
// signing is checked against the AWS SDK in sink/credentials_test.go).
func TestSASLCredentialRotation(t *testing.T) {
	env := requireEnv(t)
	k := requireSecureKafka(t)
	rng := testRand(t)
	s := newScenario(t, env, "saslrot")
	user := s.name + "-scram"
	cl := newKafkaClient(t, env.kafka)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	rotate := func(pw string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: pw}})
		if err == nil {
			err = res.Error()
		}
		return err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, _ = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: user, Mechanism: kadm.ScramSha512}}, nil)
	})
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	var handed []string
	setPassword := func() {
		t.Helper()
		pw := "scram" + randHex(rng, 16)
		if err := rotate(pw); err != nil {
			t.Fatalf("rotate the SCRAM password: %v", err)
		}
		tmp := pwFile + ".new"
		if err := os.WriteFile(tmp, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, pwFile); err != nil { // no reader ever sees a half-written file
			t.Fatal(err)
		}
		handed = append(handed, pw)
	}
	setPassword()
	opens := watchOpens(t, dir, "password")

	p := s.startArgsReady(withFlag(s.runArgs("--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", user,
		"--sasl-password-file", pwFile, "--kafka-tls-ca-file", k.file("ca.pem"), "--heartbeat-interval", "1s"), "--kafka-brokers", k.saslSSL)...)
	w := newWorkload(t, env, s.table, 10, newRandFrom(rng))
	stop := w.runContinuous(continuousOpts{maxEvents: 5, rollbackPct: 10, maxPause: 50 * time.Millisecond})
	const rotations = 8
	for range rotations {
		time.Sleep(3 * time.Second) // the credentials' lifetime in this stand-in
		setPassword()
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	w.mustWriteTxn(3, false)
	waitSlotLSN(t, env.pgDSN, s.name, w.lastPostLSN(), 60*time.Second, p)
	if p.exited() {
		t.Fatalf("walrelay exited (%s)\n%s", p.exitStatus(), p.tail(20))
	}
	p.sigterm()
	if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
		t.Fatalf("walrelay did not stop cleanly (%s)\n%s", p.exitStatus(), p.tail(20))
	}
	// 24 s of sessions that must re-authenticate every 5 s: several reads of
	// the file per connection, not one at start.
	if n := opens.Load(); n < rotations {
		t.Errorf("the password file was opened %d times during %d rotations: walrelay does not read it on re-authentication", n, rotations)
	}
	for _, m := range p.logLines() {
		if m["level"] == "ERROR" {
			t.Errorf("ERROR line while the credentials rotated: %v", m)
		}
	}
	for _, pw := range handed {
		if strings.Contains(p.log(), pw) {
			t.Error("walrelay's log shows a SASL password")
		}
	}
	res := verify(t, s, w)
	t.Logf("%s (password file read %d times, %d rotations)", res.summary("saslrot"), opens.Load(), rotations)
	res.requireClean(t)
}
