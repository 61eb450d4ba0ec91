package loopback

import (
	"net"
	"strconv"
	"testing"
)

// FreePort picks ports below the ephemeral range that a server can bind.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	lo, hi := Range()
	if lo >= hi || lo < 1024 {
		t.Fatalf("got range [%d, %d); want a non-empty range above 1023", lo, hi)
	}
	for range 100 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < lo || port >= hi {
			t.Errorf("got port %d; want one in [%d, %d)", port, lo, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listen on port %d: %v", port, err)
		}
		l.Close()
	}
}

// A port in use is never picked.
func TestFreePortSkipsPortsInUse(t *testing.T) {
	lo, hi := Range()
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	inUse := map[int]bool{}
	for p := lo; p < hi && len(held) < 2000; p += 8 {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		held = append(held, l)
		inUse[p] = true
	}
	for range 200 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if inUse[port] {
			t.Errorf("got port %d, which a listener of the test holds; want a free one", port)
		}
	}
}
