package testinfra

import (
	"net"
	"strconv"
	"testing"

	"github.com/tallypipeline/tally/devstack/loopback"
)

// FreeAddr hands out distinct loopback addresses below the ephemeral range, each one a server
// can bind.
func TestFreeAddrBelowEphemeralRange(t *testing.T) {
	lo, hi := loopback.Range()
	if lo >= hi || lo < 1024 {
		t.Fatalf("got range [%d, %d); want a non-empty range above 1023", lo, hi)
	}
	seen := map[string]bool{}
	for range 200 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(port)
		if host != "127.0.0.1" || n < lo || n >= hi {
			t.Errorf("got %s; want 127.0.0.1 with a port in [%d, %d)", addr, lo, hi)
		}
		if seen[addr] {
			t.Errorf("got %s twice; want every address once", addr)
		}
		seen[addr] = true
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on %s: %v", addr, err)
		}
		l.Close()
	}
}
