// Package webguard keeps the web pages a user has open in a browser away from the servers
// that browser can reach: tally's HTTP API and the embedded ClickHouse, which on a laptop
// listen on loopback. A page can send a cross-site form or fetch without asking, and a page
// whose own name a hostile DNS server points at 127.0.0.1 (DNS rebinding) is taken by the
// browser for the server's own origin. Wrap refuses both; LoopbackAddr and LoopbackHost tell
// whether an address is this machine's alone. Nothing here has state: safe for concurrent use.
package webguard

import (
	"net"
	"net/http"
	"strings"
)

// Options configure Wrap.
type Options struct {
	// Addr is the listen address: on a loopback one, requests naming another host are refused.
	// Other addresses are reached by names this process cannot know, so they take any Host.
	Addr string
	// TrustedOrigins may send cross-site writes (a dashboard's configured CORS origins).
	TrustedOrigins []string
	// Refuse answers a refused request in the server's own error shape; foreignHost says
	// whether it named another host, else it was a cross-site write.
	Refuse func(w http.ResponseWriter, r *http.Request, foreignHost bool)
}

// Wrap puts h behind the checks: a POST, PUT, DELETE or PATCH that another site's page sends
// (net/http's CrossOriginProtection: Sec-Fetch-Site, or an Origin that is not the Host) is
// refused, and on a loopback address so is every request whose Host is not this machine.
// A trusted origin that is not a valid origin is an error.
func Wrap(h http.Handler, o Options) (http.Handler, error) {
	cop := http.NewCrossOriginProtection()
	for _, origin := range o.TrustedOrigins {
		if err := cop.AddTrustedOrigin(origin); err != nil {
			return nil, err
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { o.Refuse(w, r, false) }))
	h = cop.Handler(h)
	if !LoopbackAddr(o.Addr) {
		return h, nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !LoopbackHost(r.Host) {
			o.Refuse(w, r, true)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

// LoopbackAddr reports whether the listen address hostport accepts connections from this machine
// only: its host is "localhost" or a loopback IP. An empty host (":8080") listens on every
// interface; other names are not resolved, since a name may later point elsewhere.
func LoopbackAddr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	return err == nil && LoopbackHost(host)
}

// LoopbackHost reports whether the Host header value host (with or without a port) names this
// machine: "localhost" in any ASCII case, or a loopback IP. A page whose own name a hostile
// DNS server points at 127.0.0.1 still sends its own name as Host, and is told apart. Names
// are compared exactly, so nothing another resolver or a Unicode case fold might map
// differently passes: "localhost." and "app.localhost" are refused too.
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	// ASCII only before the case fold: strings.EqualFold would take "ſ" (U+017F) for "s" and
	// "K" (U+212A) for "k".
	for i := range len(host) {
		if host[i] >= 0x80 {
			return false
		}
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
