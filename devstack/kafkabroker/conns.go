package kafkabroker

import (
	"net"
	"sync"
)

// connSet is the client addresses the brokers hold a connection from, so that the reaper can
// tell a group member whose process is gone (every connection of it closed) from one that is
// waiting (keepalive.go). Safe for concurrent use.
type connSet struct {
	mu   sync.Mutex
	open map[string]int // remote address: connections open from it
}

func newConnSet() *connSet { return &connSet{open: map[string]int{}} }

// has says whether a connection from addr (host:port, as kfake records a member's client host)
// is open.
func (s *connSet) has(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[addr] > 0
}

// trackListener records each accepted connection in set until it is closed (kfake closes a
// connection once its client has gone).
type trackListener struct {
	net.Listener
	set *connSet
}

func (l trackListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	addr := c.RemoteAddr().String()
	l.set.mu.Lock()
	l.set.open[addr]++
	l.set.mu.Unlock()
	return &trackedConn{Conn: c, set: l.set, addr: addr}, nil
}

type trackedConn struct {
	net.Conn
	set  *connSet
	addr string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		if c.set.open[c.addr]--; c.set.open[c.addr] <= 0 {
			delete(c.set.open, c.addr)
		}
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}
