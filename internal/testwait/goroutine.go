package testwait

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
)

// GoroutineID returns the id the runtime gives the calling goroutine in
// goroutine dumps ("goroutine 42 [running]:"). A test records it in the
// goroutine it starts, to ask Parked about that goroutine later.
func GoroutineID() int {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, err := strconv.Atoi(string(b[:bytes.IndexByte(b, ' ')]))
	if err != nil {
		panic("testwait: goroutine id from " + string(buf[:]) + ": " + err.Error())
	}
	return id
}

// Parked reports whether goroutine id waits (is neither running nor
// runnable: blocked on a channel, a lock, network I/O, a sleep) with fn in
// the name of a function on its stack, e.g. "(*Tracker).acquire" or
// "(*PgConn).ReceiveMessage". It is how a test sees that the code under test
// reached a wait that has no other observable sign, without changing that
// code. Inlined functions are on the stack too.
func Parked(id int, fn string) bool {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	head := "goroutine " + strconv.Itoa(id) + " ["
	for _, g := range strings.Split(string(buf), "\n\n") {
		rest, ok := strings.CutPrefix(g, head)
		if !ok {
			continue
		}
		state, frames, _ := strings.Cut(rest, "]:")
		state, _, _ = strings.Cut(state, ",") // "select, 2 minutes"
		if state == "running" || state == "runnable" {
			return false
		}
		return strings.Contains(frames, fn)
	}
	return false // the goroutine has ended
}
