package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminRoutes adds HealthRoutes and /metrics (reg's metrics) to mux, and with pprof Go's
// /debug/pprof/ profiles, which stay off by default because they expose internals and cost CPU
// while taken.
func AdminRoutes(mux *http.ServeMux, r *Runner, reg *prometheus.Registry, pprof bool) {
	HealthRoutes(mux, r)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if pprof {
		mux.HandleFunc("GET /debug/pprof/", httppprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", httppprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", httppprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", httppprof.Trace)
	}
}

// HealthRoutes adds /healthz (the process is alive) and /readyz (every part started, not
// shutting down) to mux: all a load balancer needs, and nothing an outsider may not see.
func HealthRoutes(mux *http.ServeMux, r *Runner) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if !r.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready")
			return
		}
		fmt.Fprintln(w, "ready")
	})
}

// HTTPServer is a Part serving handler on addr. Stop stops accepting and waits for in-flight
// requests within the stop deadline.
func HTTPServer(name, addr string, handler http.Handler) (Part, func() string) {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
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
