package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminOptions says which optional routes AdminRoutes adds.
type AdminOptions struct {
	// Pprof adds Go's /debug/pprof/ profiles, off by default because they expose internals
	// and cost CPU while taken.
	Pprof bool
}

// AdminRoutes adds HealthRoutes and /metrics (reg's metrics) to mux, and the routes opts asks for.
func AdminRoutes(mux *http.ServeMux, r *Runner, reg *prometheus.Registry, opts AdminOptions) {
	HealthRoutes(mux, r)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if opts.Pprof {
		mux.HandleFunc("GET /debug/pprof/", httppprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", httppprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", httppprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", httppprof.Trace)
	}
}

// HealthRoutes adds /healthz (the process is alive) and /readyz (every part started, not
// shutting down, and every required check passing; JSON naming each check and why it is down,
// 503 when not ready, status "degraded" with 200 when only checks of AddDegradingCheck fail) to
// mux: all a load balancer needs. It also adds FallbackRoutes, so
// the server answers unknown routes and wrong methods in the JSON error shape.
func HealthRoutes(mux *http.ServeMux, r *Runner) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		ok, results := r.Readiness(req.Context())
		body := struct {
			Status  string        `json:"status"`
			Started bool          `json:"started"`
			Checks  []CheckResult `json:"checks"`
		}{"ready", r.Ready(), results}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case !ok:
			body.Status = "not ready"
			w.WriteHeader(http.StatusServiceUnavailable)
		case slices.ContainsFunc(results, func(c CheckResult) bool { return c.Status != "up" }):
			body.Status = "degraded"
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	FallbackRoutes(mux)
}

// fallbackPattern matches every request no other pattern of the mux matches.
const fallbackPattern = "/"

// FallbackRoutes makes mux answer what none of its routes serve as JSON errors,
// {"error": "..."} like every API error: 405 with an Allow header when the path is served for
// other methods, 404 otherwise. The mux's own fallbacks answer plain text. It registers "/",
// so mux must not serve "/" itself; routes may be added before or after.
func FallbackRoutes(mux *http.ServeMux) {
	mux.HandleFunc(fallbackPattern, func(w http.ResponseWriter, r *http.Request) {
		// Trying the other methods tells a wrong method (405) from an unknown path (404).
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" && pattern != fallbackPattern {
				allowed = append(allowed, m)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if len(allowed) == 0 {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "no such route: " + r.URL.Path})
			return
		}
		slices.Sort(allowed)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		w.WriteHeader(http.StatusMethodNotAllowed)
		_ = json.NewEncoder(w).Encode(map[string]string{
			"error": fmt.Sprintf("method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allowed, ", ")),
		})
	})
}

// HTTPLimits bound how long a connection may hold a server's resources, so a slow or idle
// client cannot keep a connection (and the memory of its half-read request) for ever.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's header.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, header and body: a body trickling in is cut
	// off, and the handler's read of it fails with a deadline error.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its header to the end of its answer, so
	// it must cover reading the body, handling it and writing the answer.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no next request.
	IdleTimeout time.Duration
}

// DefaultHTTPLimits are the limits of admin servers (/healthz, /readyz, /metrics, pprof): their
// requests have no bodies; the write bound leaves room for pprof's default 30 s profile.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 60 * time.Second}
}

// HTTPServer is HTTPServerWithLimits with DefaultHTTPLimits.
func HTTPServer(name, addr string, handler http.Handler) (Part, func() string) {
	return HTTPServerWithLimits(name, addr, handler, DefaultHTTPLimits())
}

// HTTPServerWithLimits is a Part serving handler on addr within lim. Stop stops accepting and
// waits for in-flight requests within the stop deadline. The second result reports the bound
// address once started.
func HTTPServerWithLimits(name, addr string, handler http.Handler, lim HTTPLimits) (Part, func() string) {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
	}
	var ln net.Listener
	served := make(chan error, 1)
	part := Part{
		Name: name,
		Start: func(context.Context) error {
			var err error
			if ln, err = net.Listen("tcp", addr); err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			go func() { served <- srv.Serve(ln) }()
			return nil
		},
		Stop: func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
				err = errors.Join(err, serr)
			}
			return err
		},
	}
	return part, func() string {
		if ln == nil {
			return addr
		}
		return ln.Addr().String()
	}
}

// Admin says whether a component serves its own admin endpoint (/healthz, /readyz, /metrics,
// pprof): a standalone binary does (OwnAdmin); inside the all-in-one the collector's port
// serves them for every component (SharedAdmin).
type Admin bool

const (
	OwnAdmin    Admin = true
	SharedAdmin Admin = false
)
