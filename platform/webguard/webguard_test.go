package webguard

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLoopbackAddr(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8123", true}, {"localhost:8080", true}, {"[::1]:9092", true}, {"127.1.2.3:1", true},
		{":8080", false}, {"0.0.0.0:8080", false}, {"10.0.0.1:8080", false}, {"example.com:80", false}, {"127.0.0.1", false},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			if got := LoopbackAddr(tc.addr); got != tc.want {
				t.Fatalf("LoopbackAddr(%q): got %v; want %v", tc.addr, got, tc.want)
			}
		})
	}
}

func TestLoopbackHost(t *testing.T) {
	tests := []struct {
		host string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.0.0.1", true},
		{"127.1.2.3:8080", true}, // all of 127/8 is loopback
		{"localhost:8080", true},
		{"localhost", true},
		{"LOCALHOST", true},
		{"LocalHost:8080", true},
		{"[::1]:8080", true},
		{"[::1]", true},
		{"[0:0:0:0:0:0:0:1]:8080", true},
		{"evil.example:8080", false},
		{"evil.example", false},
		{"127.0.0.1.evil.example", false},
		{"127.0.0.1.evil.example:8080", false},
		{"localhost.evil.example:8080", false},
		{"", false},
		{":8080", false},
		{"localhost.", false},      // the absolute form: exact names only
		{"localhost.:8080", false}, // the same with a port
		{"app.localhost:8080", false},
		{"locaⅼhost:8080", false}, // U+217C SMALL ROMAN NUMERAL FIFTY for the l
		{"ｌocalhost", false},      // U+FF4C FULLWIDTH L
		{"localhoſt", false},      // U+017F LONG S, which strings.EqualFold takes for s
		{"xn--localhost-", false}, // a punycode label is another name
		{"127.0.0.1:8080:80", false},
		{"0x7f.0.0.1:8080", false}, // forms net.ParseIP does not take are no IPs
		{"2130706433:8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"192.168.1.10:8080", false},
		{"[fe80::1%25eth0]:8080", false},
		{"\u212Aocalhost", false}, // KELVIN SIGN, which strings.EqualFold takes for k
		{"１２７.0.0.1", false},
		{"[::ffff:127.0.0.1]:80", true},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			if got := LoopbackHost(tt.host); got != tt.want {
				t.Errorf("LoopbackHost(%q): got %v; want %v", tt.host, got, tt.want)
			}
		})
	}
}

// Whatever LocalHost accepts names localhost (ASCII, any case) or a loopback IP once its port
// is taken off.
// Whatever LoopbackHost accepts names localhost (ASCII, any case) or a loopback IP once its port
// is taken off.
func FuzzLoopbackHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1:8080", "localhost", "[::1]:1", "evil.example", "localhoſt", "[::1", "[]", "::1", "127.0.0.1.", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !LoopbackHost(host) {
			return
		}
		name := host
		if h, _, err := net.SplitHostPort(host); err == nil {
			name = h
		}
		name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
		if strings.ToLower(name) == "localhost" {
			return
		}
		if ip := net.ParseIP(name); ip == nil || !ip.IsLoopback() {
			t.Fatalf("LoopbackHost(%q): got true; want false: %q is neither localhost nor a loopback IP", host, name)
		}
	})
}

func TestWrap(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	refuse := func(w http.ResponseWriter, _ *http.Request, foreignHost bool) {
		if foreignHost {
			w.WriteHeader(http.StatusMisdirectedRequest) // told apart from a cross-site refusal
			return
		}
		w.WriteHeader(http.StatusForbidden)
	}
	tests := []struct {
		name, addr, method, host string
		header                   map[string]string
		want                     int
	}{
		{"local read", "127.0.0.1:8080", "GET", "127.0.0.1:8080", nil, 204},
		{"local write", "127.0.0.1:8080", "POST", "localhost:8080", nil, 204},
		{"same-origin write", "127.0.0.1:8080", "POST", "localhost:8080", map[string]string{"Origin": "http://localhost:8080", "Sec-Fetch-Site": "same-origin"}, 204},
		{"cross-site write", "127.0.0.1:8080", "POST", "localhost:8080", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, 403},
		{"cross-site write, Origin only", "127.0.0.1:8080", "POST", "localhost:8080", map[string]string{"Origin": "https://evil.example"}, 403},
		{"cross-site read", "127.0.0.1:8080", "GET", "localhost:8080", map[string]string{"Sec-Fetch-Site": "cross-site"}, 204},
		{"trusted origin", "127.0.0.1:8080", "POST", "localhost:8080", map[string]string{"Origin": "https://dash.example", "Sec-Fetch-Site": "cross-site"}, 204},
		{"rebound name", "127.0.0.1:8080", "GET", "evil.example:8080", nil, 421},
		{"rebound name on a LAN address", "10.0.0.5:8080", "GET", "evil.example:8080", nil, 204},
		{"cross-site write on a LAN address", "10.0.0.5:8080", "POST", "tally.example", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Wrap(ok, Options{Addr: tc.addr, TrustedOrigins: []string{"https://dash.example"}, Refuse: refuse})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(tc.method, "http://"+tc.host+"/", nil)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("got %d; want %d", w.Code, tc.want)
			}
		})
	}
	if _, err := Wrap(ok, Options{TrustedOrigins: []string{"not an origin"}, Refuse: refuse}); err == nil {
		t.Fatal("Wrap with a bad trusted origin: got no error; want one")
	}
}
