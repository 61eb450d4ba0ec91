package config

import (
	"net"
	"strings"
)

// Loopback reports whether the listen address hostport accepts connections from this machine
// only: its host is "localhost" or a loopback IP. An empty host (":8080") listens on every
// interface; other names are not resolved, since a name may later point elsewhere.
func Loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
