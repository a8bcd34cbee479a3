package e2e

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// tcpProxy is a TCP forwarder on 127.0.0.1 whose behaviour the test switches at run time.
// It exists to put network faults between walrelay and Postgres (the fault suite does not
// proxy Kafka: a broker advertises its own address in metadata, so a client would leave a
// proxy after the first metadata request).
//
// Modes (setMode):
//   - proxyPass: forward bytes both ways.
//   - proxyDrop: every open connection is reset (both sides closed, RST towards the
//     client) and new connections are accepted and reset at once: a network cut / a
//     refused peer.
//   - proxyStall: connections stay open, new ones are accepted, but no byte is forwarded
//     in either direction; the proxy stops reading, so the peers' TCP buffers fill. Seen
//     from either end this is a half-open connection: writes succeed, nothing arrives,
//     nothing fails. Switching back to proxyPass resumes the same connections.
//   - proxySlow: forward at most rate bytes per second per connection and direction.
//
// holdExisting turns every connection open at the time of the call into a hostage: it is
// kept open and never forwards again, whatever the mode, until the proxy closes (or
// releaseHostages resets it). Connections opened later follow the mode. This is the
// realistic half-open case: the old path is dead, a new connection works, and only the
// client's own liveness checks can tell the difference.
type tcpProxy struct {
	t      *testing.T
	name   string
	target string
	ln     net.Listener

	mu       sync.Mutex
	mode     proxyMode
	rate     int           // bytes per second in proxySlow
	wake     chan struct{} // closed and replaced on every change: wakes blocked pumps
	conns    map[*proxyConn]struct{}
	accepted int // connections accepted and forwarded (not reset by proxyDrop)
	reset    int // connections reset because of proxyDrop
	closed   bool
	wg       sync.WaitGroup
}

type proxyMode int

const (
	proxyPass proxyMode = iota
	proxyDrop
	proxyStall
	proxySlow
)

func (m proxyMode) String() string {
	switch m {
	case proxyPass:
		return "pass"
	case proxyDrop:
		return "drop"
	case proxyStall:
		return "stall"
	case proxySlow:
		return "slow"
	}
	return "?"
}

type proxyConn struct {
	client, server net.Conn
	hostage        bool // never forwards again
	once           sync.Once
}

func (c *proxyConn) close(rst bool) {
	c.once.Do(func() {
		if rst {
			if tc, ok := c.client.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
		}
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// newTCPProxy listens on 127.0.0.1:0 and forwards to target in proxyPass mode. It is
// closed at the end of the test.
func newTCPProxy(t *testing.T, name, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy %s: listen: %v", name, err)
	}
	p := &tcpProxy{t: t, name: name, target: target, ln: ln, wake: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.close)
	t.Logf("proxy %s: 127.0.0.1:%d -> %s", name, p.port(), target)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }
func (p *tcpProxy) port() int    { return p.ln.Addr().(*net.TCPAddr).Port }

// setMode switches the mode; rate is used by proxySlow (bytes per second).
func (p *tcpProxy) setMode(m proxyMode, rate int) {
	p.mu.Lock()
	p.mode, p.rate = m, rate
	var drop []*proxyConn
	if m == proxyDrop {
		for c := range p.conns {
			drop = append(drop, c)
			delete(p.conns, c)
		}
		p.reset += len(drop)
	}
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
	for _, c := range drop {
		c.close(true)
	}
	p.t.Logf("proxy %s: mode %s (rate %d B/s); reset %d connections", p.name, m, rate, len(drop))
}

// retarget points the proxy at another server and resets every open connection (RST
// towards the client): a failover behind a stable address (a virtual IP, DNS, a
// pooler). New connections go to target.
func (p *tcpProxy) retarget(target string) {
	p.mu.Lock()
	old := p.target
	p.target = target
	drop := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		drop = append(drop, c)
		delete(p.conns, c)
	}
	p.reset += len(drop)
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
	for _, c := range drop {
		c.close(true)
	}
	p.t.Logf("proxy %s: %s -> %s; reset %d connections", p.name, old, target, len(drop))
}

// holdExisting makes every open connection a hostage (see tcpProxy) and returns how many.
func (p *tcpProxy) holdExisting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if !c.hostage {
			c.hostage = true
			n++
		}
	}
	p.t.Logf("proxy %s: %d open connections are now half-open hostages", p.name, n)
	return n
}

// releaseHostages resets the hostage connections and returns how many there were.
func (p *tcpProxy) releaseHostages() int {
	p.mu.Lock()
	var hs []*proxyConn
	for c := range p.conns {
		if c.hostage {
			hs = append(hs, c)
			delete(p.conns, c)
		}
	}
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
	for _, c := range hs {
		c.close(true)
	}
	return len(hs)
}

// counts returns the number of connections accepted and forwarded so far, and of those
// open now.
func (p *tcpProxy) counts() (accepted, open int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, len(p.conns)
}

func (p *tcpProxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.conns = map[*proxyConn]struct{}{}
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		c.close(false)
	}
	p.wg.Wait()
}

func (p *tcpProxy) acceptLoop() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode, closed, target := p.mode, p.closed, p.target
		if mode == proxyDrop || closed {
			p.reset++
			p.mu.Unlock()
			if tc, ok := cc.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = cc.Close()
			continue
		}
		p.mu.Unlock()
		sc, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			_ = cc.Close()
			continue
		}
		c := &proxyConn{client: cc, server: sc}
		p.mu.Lock()
		if p.closed || p.target != target { // retargeted while dialing: reset, the client retries
			p.mu.Unlock()
			c.close(false)
			continue
		}
		p.conns[c] = struct{}{}
		p.accepted++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(c, cc, sc)
		go p.pump(c, sc, cc)
	}
}

// gate blocks while c may not forward and returns the byte budget of the next write (0:
// unlimited) or false when the connection is gone.
func (p *tcpProxy) gate(c *proxyConn) (rate int, ok bool) {
	for {
		p.mu.Lock()
		_, open := p.conns[c]
		mode, r, wake, hostage := p.mode, p.rate, p.wake, c.hostage
		p.mu.Unlock()
		if !open {
			return 0, false
		}
		if !hostage && mode != proxyStall {
			if mode == proxySlow {
				return max(r, 1), true
			}
			return 0, true
		}
		<-wake
	}
}

// pump copies src to dst, consulting the mode before every read and every write.
func (p *tcpProxy) pump(c *proxyConn, src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		_, open := p.conns[c]
		hostage := c.hostage
		if open && !hostage {
			delete(p.conns, c)
		}
		p.mu.Unlock()
		// A hostage keeps both sockets open (the point of a half-open connection) until
		// it is released or the proxy closes.
		if !hostage || !open {
			c.close(false)
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		rate, ok := p.gate(c)
		if !ok {
			return
		}
		n := len(buf)
		if rate > 0 {
			n = min(n, max(rate/10, 64)) // about 10 chunks a second
		}
		k, err := src.Read(buf[:n])
		if k > 0 {
			if rate, ok = p.gate(c); !ok {
				return
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
			if rate > 0 {
				time.Sleep(time.Duration(float64(k) / float64(rate) * float64(time.Second)))
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			// Half-close towards dst, so that the other direction can finish.
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}
