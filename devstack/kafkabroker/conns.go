package kafkabroker

import (
	"net"
	"sync"
	"time"
)

// connSet is the client addresses the brokers hold a connection from, so that the reaper can
// tell a group member whose process is gone (every connection of it closed) from one that is
// waiting (keepalive.go), and since when it is gone. Safe for concurrent use.
type connSet struct {
	mu     sync.Mutex
	open   map[string]int       // remote address: connections open from it
	closed map[string]time.Time // remote address: when its last connection closed, for closedKeep
}

// closedKeep is how long the time an address's last connection closed is kept: past the
// longest silence the reaper waits for.
const closedKeep = 2 * maxSessionTimeout

func newConnSet() *connSet { return &connSet{open: map[string]int{}, closed: map[string]time.Time{}} }

// closedAt says when the last connection from addr closed, if none is open and it closed
// within closedKeep.
func (s *connSet) closedAt(addr string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.closed[addr]
	return at, ok && s.open[addr] == 0
}

// has says whether a connection from addr (host:port, as kfake records a member's client host)
// is open.
func (s *connSet) has(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[addr] > 0
}

// track records c in s until it is closed (kfake closes a connection once its client has gone).
func (s *connSet) track(c net.Conn) net.Conn {
	addr := c.RemoteAddr().String()
	s.mu.Lock()
	s.open[addr]++
	s.mu.Unlock()
	return &trackedConn{Conn: c, set: s, addr: addr}
}

// release records that a connection from addr closed, and forgets the closes older than
// closedKeep.
func (s *connSet) release(addr string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[addr]--; s.open[addr] <= 0 {
		delete(s.open, addr)
		s.closed[addr] = now
	}
	for a, at := range s.closed {
		if now.Sub(at) > closedKeep {
			delete(s.closed, a)
		}
	}
}

type trackedConn struct {
	net.Conn
	set  *connSet
	addr string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.set.release(c.addr) })
	return c.Conn.Close()
}
