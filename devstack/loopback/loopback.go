// Package loopback picks free loopback ports for servers that another process binds (a child
// such as redis-server, or the processes an end-to-end test starts), which therefore cannot
// listen on port 0 themselves. It picks at random below the kernel's ephemeral range: a port
// from inside it, which listening on port 0 gives, may become the local end of any outgoing
// connection on the host between the pick and the bind ("bind: address already in use"); the
// kernel never hands out a port below that range by itself. Stateless and safe for concurrent
// use: two picks may return the same port, so a caller that picks several before binding them
// keeps them apart itself.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// tries bounds the picks of one FreePort: ports in use are skipped.
const tries = 1000

// FreePort returns a port of 127.0.0.1 that nothing listens on now, below the ephemeral range.
func FreePort() (int, error) {
	lo, hi := Range()
	for range tries {
		port := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port in [%d, %d) after %d tries", lo, hi, tries)
}

// Range is where FreePort picks: the 16,384 ports below the first ephemeral one
// (net.ipv4.ip_local_port_range; 32768, Linux's default, when it cannot be read).
func Range() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				hi = n
			}
		}
	}
	return max(1024, hi-16384), hi
}
