// Package testwait lets tests wait for a condition instead of sleeping for a
// guess of how long something takes.
//
// A condition is polled at once, then after pauses that start at a
// millisecond and double up to MaxInterval, so a condition that holds soon is
// seen soon and one that takes long costs a few calls a second. Only tests
// import this package; the conditions it polls must be safe to call from the
// polling goroutine (read counters, channels, metrics, a database).
//
// When the code under test reaches a wait that shows no other sign (blocked
// at a cap, in a network receive), GoroutineID and Parked let a test see it
// in the goroutine's stack rather than sleep and hope it got there.
package testwait
