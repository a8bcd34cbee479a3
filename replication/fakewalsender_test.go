package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgproto3"
)

// fakeWalsender is an in-process server that speaks just enough of the
// Postgres protocol for a replication connection: startup (trust),
// IDENTIFY_SYSTEM, and START_REPLICATION, which it answers with
// CopyBothResponse followed by the CopyData payloads of the connection's
// script, the script's raw bytes, then CopyDone, and closes its sending side.
// What the client sends during the copy is read and dropped. One listener
// serves any number of connections; each connection takes the next script
// from the scripts channel.
type fakeWalsender struct {
	ln      net.Listener
	system  Identity
	xlogPos pglogrepl.LSN
	scripts chan script
	wg      sync.WaitGroup
}

func startFakeWalsender(tb testing.TB, system Identity) *fakeWalsender {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	f := &fakeWalsender{ln: ln, system: system, xlogPos: 0x1000000, scripts: make(chan script, 1)}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer nc.Close()
				_ = f.serve(nc)
			}()
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		f.wg.Wait()
	})
	return f
}

func (f *fakeWalsender) dsn() string {
	return fmt.Sprintf("postgres://walrelay@%s/outbox?sslmode=disable&connect_timeout=5", f.ln.Addr())
}

func (f *fakeWalsender) serve(nc net.Conn) error {
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	be := pgproto3.NewBackend(nc, nc)
	sm, err := be.ReceiveStartupMessage()
	if err != nil {
		return err
	}
	if _, ok := sm.(*pgproto3.StartupMessage); !ok {
		return fmt.Errorf("unexpected startup message %T", sm)
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "15.0"})
	be.Send(&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := be.Flush(); err != nil {
		return err
	}
	for {
		msg, err := be.Receive()
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.Terminate:
			return nil
		case *pgproto3.Query:
			switch {
			case m.String == "IDENTIFY_SYSTEM":
				be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{
					{Name: []byte("systemid"), DataTypeOID: 25, DataTypeSize: -1},
					{Name: []byte("timeline"), DataTypeOID: 23, DataTypeSize: 4},
					{Name: []byte("xlogpos"), DataTypeOID: 25, DataTypeSize: -1},
					{Name: []byte("dbname"), DataTypeOID: 25, DataTypeSize: -1},
				}})
				be.Send(&pgproto3.DataRow{Values: [][]byte{
					[]byte(f.system.SystemID), fmt.Appendf(nil, "%d", f.system.Timeline), []byte(f.xlogPos.String()), []byte("outbox"),
				}})
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("IDENTIFY_SYSTEM")})
				be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			case strings.HasPrefix(m.String, "START_REPLICATION"):
				var sc script
				select {
				case sc = <-f.scripts:
				case <-time.After(10 * time.Second):
					return errors.New("no script for START_REPLICATION")
				}
				return f.copyBoth(nc, be, sc)
			default:
				be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: "fake walsender: unsupported " + m.String})
				be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			}
			if err := be.Flush(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected message %T", msg)
		}
	}
}

// script is what the fake walsender sends once streaming started.
type script struct {
	frames [][]byte // CopyData payloads
	raw    []byte   // then these bytes as they are (not a CopyData)
	// hold, when set, keeps the stream open after the frames until it is
	// closed or the client ends the copy.
	hold <-chan struct{}
	// status, when set, receives the flush position of every standby status
	// update the client sends (the send is dropped when status is full).
	status chan<- pglogrepl.LSN
}

// copyBoth sends the script and ends the copy, while the client's status
// updates are read and dropped.
func (f *fakeWalsender) copyBoth(nc net.Conn, be *pgproto3.Backend, sc script) error {
	be.Send(&pgproto3.CopyBothResponse{})
	if err := be.Flush(); err != nil {
		return err
	}
	done := make(chan struct{})
	clientDone := make(chan struct{})
	go func() {
		defer close(done)
		for {
			msg, err := be.Receive()
			if err != nil {
				return
			}
			switch m := msg.(type) {
			case *pgproto3.CopyDone:
				close(clientDone)
			case *pgproto3.CopyData:
				// Standby status update: 'r', write, flush, apply, time, reply.
				if sc.status != nil && len(m.Data) == 34 && m.Data[0] == 'r' {
					select {
					case sc.status <- pglogrepl.LSN(binary.BigEndian.Uint64(m.Data[9:])):
					default:
					}
				}
			}
		}
	}()
	for _, payload := range sc.frames {
		be.Send(&pgproto3.CopyData{Data: payload})
	}
	err := be.Flush()
	if err == nil && len(sc.raw) > 0 {
		_, err = nc.Write(sc.raw)
	}
	if sc.hold != nil {
		select {
		case <-sc.hold:
		case <-clientDone:
		}
	}
	be.Send(&pgproto3.CopyDone{})
	err = errors.Join(err, be.Flush())
	// Half-close: a client still waiting for the rest of a message sees EOF,
	// and its status updates are still read (no reset).
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	<-done // until the client closes the connection
	return err
}

// xlogData builds a 'w' CopyData payload.
func xlogData(walStart, walEnd pglogrepl.LSN, data []byte) []byte {
	b := make([]byte, 0, xlogHeaderLen+len(data))
	b = append(b, pglogrepl.XLogDataByteID)
	b = binary.BigEndian.AppendUint64(b, uint64(walStart))
	b = binary.BigEndian.AppendUint64(b, uint64(walEnd))
	b = binary.BigEndian.AppendUint64(b, 0) // send time
	return append(b, data...)
}

// keepalive builds a 'k' CopyData payload.
func keepalive(walEnd pglogrepl.LSN, reply bool) []byte {
	b := make([]byte, 0, keepaliveLen)
	b = append(b, pglogrepl.PrimaryKeepaliveMessageByteID)
	b = binary.BigEndian.AppendUint64(b, uint64(walEnd))
	b = binary.BigEndian.AppendUint64(b, 0)
	if reply {
		return append(b, 1)
	}
	return append(b, 0)
}

// streamResult is what one Stream.Run over a script delivered.
type streamResult struct {
	msgs []Message // copies
	err  error
}

// runScript opens a replication connection to f (connect + IDENTIFY_SYSTEM,
// as Open does after its checks), streams the script through the real Stream
// and returns what it delivered and how Run ended.
func runScript(tb testing.TB, f *fakeWalsender, frames [][]byte) streamResult {
	tb.Helper()
	return runRaw(tb, f, script{frames: frames})
}

// runRaw is runScript with raw bytes after the frames.
func runRaw(tb testing.TB, f *fakeWalsender, sc script) streamResult {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := connect(ctx, Config{DSN: f.dsn(), Slot: "fake", Publication: "fake", Batches: 2, BatchBytes: 4 << 10,
		StatusInterval: 10 * time.Millisecond, ShutdownTimeout: time.Second})
	if err != nil {
		tb.Fatalf("connect to the fake walsender: %v", err)
	}
	if err := c.identify(ctx); err != nil {
		_ = c.Close(context.Background())
		tb.Fatalf("identify: %v", err)
	}
	if c.System != f.system {
		tb.Fatalf("identity %v, want %v", c.System, f.system)
	}
	c.Start = 0x100
	f.scripts <- sc
	s := c.NewStream(settledAt(c.Start), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	var res streamResult
	for b := range s.Batches() {
		for _, m := range b.Msgs {
			m.Data = bytes.Clone(m.Data)
			res.msgs = append(res.msgs, m)
		}
		s.Release(b)
	}
	res.err = <-errc
	if ctx.Err() != nil {
		tb.Fatalf("the stream did not end within the deadline (err %v)", res.err)
	}
	return res
}

// TestEmptyXLogDataIsAnError: an XLogData whose header is complete but which
// carries no pgoutput message at all ends the stream with a *FrameError that
// names the message's WAL position. Before, the stream indexed the empty
// payload to look for a commit and panicked.
func TestEmptyXLogDataIsAnError(t *testing.T) {
	f := startFakeWalsender(t, Identity{SystemID: "7300000000000000001", Timeline: 1})
	begin := append([]byte{'B'}, make([]byte, 20)...)
	res := runScript(t, f, [][]byte{
		keepalive(0x2000, false),
		xlogData(0x1500, 0x2000, begin),
		xlogData(0x1600, 0x2000, nil), // the empty one
		xlogData(0x1700, 0x2000, []byte{'C', 0}),
	})
	var fe *FrameError
	if !errors.As(res.err, &fe) || !errors.Is(res.err, ErrBadFrame) {
		t.Fatalf("Run returned %v, want a *FrameError wrapping ErrBadFrame", res.err)
	}
	if fe.Type != 'w' || fe.LSN != 0x1600 || fe.Len != xlogHeaderLen {
		t.Errorf("FrameError %+v: want type 'w', lsn 0/1600, len %d", fe, xlogHeaderLen)
	}
	if !strings.Contains(res.err.Error(), "0/1600") {
		t.Errorf("error %q does not name the LSN", res.err)
	}
	for _, m := range res.msgs {
		if !m.Keepalive && m.WALStart >= 0x1600 {
			t.Errorf("message at %s delivered after the bad frame", m.WALStart)
		}
	}
	t.Logf("Run: %v", res.err)
}

// TestStreamFramingErrors drives the real Stream over the fake walsender with
// one malformed CopyData after a valid keepalive: each ends Run with a typed
// error carrying the type, the length, the offset and a position.
func TestStreamFramingErrors(t *testing.T) {
	f := startFakeWalsender(t, Identity{SystemID: "7300000000000000002", Timeline: 3})
	tests := []struct {
		name    string
		frame   []byte
		typ     byte
		offset  int
		lsn     pglogrepl.LSN
		comment string
	}{
		{"empty CopyData", []byte{}, 0, 0, 0x100, "no type byte"},
		{"w shorter than its header", xlogData(0x1600, 0x2000, nil)[:10], 'w', 10, 0x100, ""},
		{"w header only", xlogData(0x1600, 0x2000, nil), 'w', xlogHeaderLen, 0x1600, ""},
		{"k truncated", keepalive(0x2000, true)[:9], 'k', 9, 0x100, ""},
		{"k too long", append(keepalive(0x2000, true), 0), 'k', keepaliveLen, 0x100, ""},
		{"k type byte only", []byte{'k'}, 'k', 1, 0x100, ""},
		{"unknown type", []byte{'x', 1, 2, 3}, 'x', 0, 0x100, ""},
		{"client status type from server", append([]byte{'r'}, make([]byte, 33)...), 'r', 0, 0x100, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runScript(t, f, [][]byte{keepalive(0x2000, false), tc.frame, keepalive(0x3000, false)})
			var fe *FrameError
			if !errors.As(res.err, &fe) || !errors.Is(res.err, ErrBadFrame) {
				t.Fatalf("Run returned %v, want a *FrameError", res.err)
			}
			if fe.Type != tc.typ || fe.Offset != tc.offset || fe.Len != len(tc.frame) || fe.LSN != tc.lsn {
				t.Errorf("FrameError %+v: want type %q offset %d len %d lsn %s", fe, tc.typ, tc.offset, len(tc.frame), tc.lsn)
			}
			for _, m := range res.msgs {
				if m.ServerWALEnd == 0x3000 {
					t.Errorf("a message after the bad frame was delivered")
				}
			}
		})
	}
}

// frameValid is the fuzz oracle, written independently of parseFrame: a
// keepalive is exactly 18 bytes, an XLogData is its 25-byte header plus at
// least one byte.
func frameValid(b []byte) bool {
	switch {
	case len(b) == 18 && b[0] == 'k':
		return true
	case len(b) > 25 && b[0] == 'w':
		return true
	}
	return false
}

// splitFrames cuts fuzz input into CopyData payloads: each is a 2-byte
// big-endian length followed by that many bytes (fewer at the end).
func splitFrames(in []byte) [][]byte {
	var out [][]byte
	for len(in) >= 2 && len(out) < 64 {
		n := int(binary.BigEndian.Uint16(in))
		in = in[2:]
		n = min(n, len(in))
		out = append(out, in[:n])
		in = in[n:]
	}
	return out
}

func joinFrames(frames ...[]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = binary.BigEndian.AppendUint16(b, uint16(len(f)))
		b = append(b, f...)
	}
	return b
}

// FuzzStreamFraming feeds arbitrary CopyData payloads from a fake walsender to
// the real Stream. Whatever the bytes, Run never panics; it delivers the valid
// messages in order, unchanged; the first malformed one ends it with a
// *FrameError of that message's type; a well-formed script ends with the
// server's CopyDone, everything delivered.
func FuzzStreamFraming(f *testing.F) {
	begin := append([]byte{'B'}, make([]byte, 20)...)
	commit := append([]byte{'C', 0}, make([]byte, 24)...)
	f.Add(joinFrames(keepalive(0x2000, true), xlogData(0x1500, 0x2000, begin), xlogData(0x1600, 0x2000, commit)))
	f.Add(joinFrames(xlogData(0x1500, 0x2000, begin), xlogData(0x1600, 0x2000, nil)))
	f.Add(joinFrames(xlogData(0x1500, 0x2000, nil)[:10]))
	f.Add(joinFrames(keepalive(0x2000, false)[:9]))
	f.Add(joinFrames([]byte{'x', 1}))
	f.Add(joinFrames([]byte{}))
	f.Add(joinFrames(keepalive(0x2000, false), xlogData(0x1500, 0x2000, bytes.Repeat([]byte{'I'}, 5000))))
	fake := startFakeWalsender(f, Identity{SystemID: "7300000000000000003", Timeline: 2})
	const endMark = pglogrepl.LSN(0xFEEDFACE)
	f.Fuzz(func(t *testing.T, in []byte) {
		frames := splitFrames(in)
		// A final keepalive hands over whatever the stream still holds.
		all := append(frames, keepalive(endMark, false))
		var want []Message
		bad := -1
		for i, b := range frames {
			if !frameValid(b) {
				bad = i
				break
			}
			if b[0] == 'k' {
				want = append(want, Message{Keepalive: true, ServerWALEnd: pglogrepl.LSN(binary.BigEndian.Uint64(b[1:]))})
			} else {
				want = append(want, Message{WALStart: pglogrepl.LSN(binary.BigEndian.Uint64(b[1:])),
					ServerWALEnd: pglogrepl.LSN(binary.BigEndian.Uint64(b[9:])), Data: b[25:]})
			}
		}
		res := runScript(t, fake, all)
		if bad < 0 {
			want = append(want, Message{Keepalive: true, ServerWALEnd: endMark})
			if res.err == nil || !strings.Contains(res.err.Error(), "CopyDone") {
				t.Fatalf("well-formed script: Run returned %v, want the server's CopyDone", res.err)
			}
			if len(res.msgs) != len(want) {
				t.Fatalf("well-formed script: delivered %d messages, want %d", len(res.msgs), len(want))
			}
		} else {
			var fe *FrameError
			if !errors.As(res.err, &fe) || !errors.Is(res.err, ErrBadFrame) {
				t.Fatalf("frame %d (%x) is malformed: Run returned %v, want a *FrameError", bad, frames[bad], res.err)
			}
			var typ byte
			if len(frames[bad]) > 0 {
				typ = frames[bad][0]
			}
			if fe.Type != typ || fe.Len != len(frames[bad]) || fe.Offset > fe.Len {
				t.Fatalf("frame %d (%x): FrameError %+v", bad, frames[bad], fe)
			}
			if len(res.msgs) > len(want) {
				t.Fatalf("delivered %d messages, but only %d precede the malformed one", len(res.msgs), len(want))
			}
		}
		for i, m := range res.msgs {
			w := want[i]
			if m.Keepalive != w.Keepalive || m.WALStart != w.WALStart || m.ServerWALEnd != w.ServerWALEnd || !bytes.Equal(m.Data, w.Data) {
				t.Fatalf("message %d: got %+v, want %+v", i, m, w)
			}
		}
	})
}

// TestStreamProtocolErrors: protocol messages that do not belong in a
// replication stream, or a stream cut inside a message, end Run with an error
// (never a panic, never a hang); a notice is logged and the stream goes on.
func TestStreamProtocolErrors(t *testing.T) {
	f := startFakeWalsender(t, Identity{SystemID: "7300000000000000004", Timeline: 1})
	enc := func(m pgproto3.BackendMessage) []byte {
		b, err := m.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	copyDataHeader := binary.BigEndian.AppendUint32([]byte{'d'}, 4+100) // announces 100 bytes
	tests := []struct {
		name    string
		raw     []byte
		wantErr string // substring; "" means the server's CopyDone ends the stream
	}{
		{"CopyData cut short", append(copyDataHeader, keepalive(0x2000, false)[:10]...), "receive from postgres"},
		{"ReadyForQuery inside the copy", enc(&pgproto3.ReadyForQuery{TxStatus: 'I'}), "unexpected message *pgproto3.ReadyForQuery"},
		{"ErrorResponse", enc(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}), "57P01"},
		{"unknown protocol message", []byte{0x01, 0, 0, 0, 4}, "receive from postgres"},
		{"message length below 4", []byte{'d', 0, 0, 0, 2}, "receive from postgres"},
		{"notice, then the stream goes on", append(enc(&pgproto3.NoticeResponse{Severity: "WARNING", Code: "01000", Message: "hello"}),
			enc(&pgproto3.CopyData{Data: keepalive(0x3000, false)})...), "CopyDone"},
		// Postgres 18's pgoutput warns and skips the changes of a publication
		// that does not exist at that point in the WAL: going on would confirm
		// past them.
		{"publication skipped", append(enc(&pgproto3.NoticeResponse{Severity: "WARNING", Code: "42704", Message: `skipped loading publication "walrelay"`,
			Detail: "The publication does not exist at this point in the WAL."}),
			enc(&pgproto3.CopyData{Data: keepalive(0x3000, false)})...), "is missing at this point in the WAL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runRaw(t, f, script{frames: [][]byte{keepalive(0x2000, false)}, raw: tc.raw})
			if res.err == nil || !strings.Contains(res.err.Error(), tc.wantErr) {
				t.Fatalf("Run returned %v, want an error containing %q", res.err, tc.wantErr)
			}
			if len(res.msgs) == 0 || res.msgs[0].ServerWALEnd != 0x2000 {
				t.Errorf("the keepalive before the bad bytes was not delivered: %+v", res.msgs)
			}
			if tc.name == "publication skipped" && len(res.msgs) != 1 {
				t.Errorf("after the skipped publication: delivered %+v, want nothing more", res.msgs)
			}
			if strings.HasPrefix(tc.name, "notice") && (len(res.msgs) != 2 || res.msgs[1].ServerWALEnd != 0x3000) {
				t.Errorf("after a notice: delivered %+v, want both keepalives", res.msgs)
			}
			t.Logf("Run: %v", res.err)
		})
	}
}
