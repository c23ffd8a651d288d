// Package dropproxy is the answer-dropping load balancer of the
// integration module's multi-process tests (integration/idemhttp,
// integration/idemgrpc): it forwards TCP connections to several server
// processes in turn and loses some of their answers after the server sent
// them, so that a retrying client sends the call again.
package dropproxy

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections to its backends in turn and, with
// probability P for each chunk a backend answers, resets the client's
// connection instead of forwarding the chunk: the server has answered, the
// client never hears it.
type Proxy struct {
	ln        net.Listener
	backends  []string
	p         float64
	keepFirst bool
	next      atomic.Int64
	drops     atomic.Int64
	wg        sync.WaitGroup
	mu        sync.Mutex
	conns     map[net.Conn]bool
}

// Start starts a Proxy to backends on a free loopback port, dropping with
// probability p; with keepFirst, a connection's first answer chunk is
// always forwarded (an HTTP/2 server's preface: dropping it only makes the
// client reconnect). It stops when the test ends.
func Start(t testing.TB, backends []string, p float64, keepFirst bool) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &Proxy{ln: ln, backends: backends, p: p, keepFirst: keepFirst, conns: map[net.Conn]bool{}}
	px.wg.Add(1)
	go px.accept()
	t.Cleanup(func() {
		ln.Close()
		px.mu.Lock()
		for c := range px.conns {
			c.Close()
		}
		px.mu.Unlock()
		px.wg.Wait()
	})
	return px
}

// Addr is the proxy's address.
func (px *Proxy) Addr() string { return px.ln.Addr().String() }

// Drops is the number of answers dropped so far.
func (px *Proxy) Drops() int64 { return px.drops.Load() }

func (px *Proxy) accept() {
	defer px.wg.Done()
	for {
		c, err := px.ln.Accept()
		if err != nil {
			return
		}
		px.wg.Add(1)
		go func() {
			defer px.wg.Done()
			px.pipe(c)
		}()
	}
}

// track registers c to be closed when the proxy stops.
func (px *Proxy) track(c net.Conn) {
	px.mu.Lock()
	px.conns[c] = true
	px.mu.Unlock()
}

func (px *Proxy) untrack(c net.Conn) {
	px.mu.Lock()
	delete(px.conns, c)
	px.mu.Unlock()
	c.Close()
}

func (px *Proxy) pipe(client net.Conn) {
	px.track(client)
	defer px.untrack(client)
	backend, err := net.Dial("tcp", px.backends[int(px.next.Add(1))%len(px.backends)])
	if err != nil {
		return
	}
	px.track(backend)
	defer px.untrack(backend)
	go func() {
		io.Copy(backend, client)
		backend.Close()
	}()
	buf := make([]byte, 32<<10)
	first := px.keepFirst
	for {
		n, err := backend.Read(buf)
		if n > 0 {
			if !first && rand.Float64() < px.p {
				px.drops.Add(1)
				if tc, ok := client.(*net.TCPConn); ok {
					tc.SetLinger(0) // a reset, as a dying middlebox sends
				}
				return
			}
			first = false
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
