package collector

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/collector/auth"
	"tally/collector/collectorconf"
	"tally/platform/config"
	"tally/platform/lifecycle"
)

// access puts the API's mux behind access control when auth is on, and says where the admin
// routes go: with auth on, /metrics and /debug/pprof/ move to their own server on
// collector.admin_addr (the returned part) and the API keeps only /healthz and /readyz; with
// auth off the API listens on loopback only (config refuses anything else), so they stay on it.
func access(cfg *config.Config, s *collectorconf.Settings, mux *http.ServeMux, runner *lifecycle.Runner, logger *slog.Logger, reg *prometheus.Registry, now func() time.Time) (http.Handler, []lifecycle.Part) {
	if !s.AuthOn() {
		lifecycle.AdminRoutes(mux, runner, reg, lifecycle.AdminOptions{Pprof: cfg.Debug.Pprof})
		return mux, nil
	}
	lifecycle.HealthRoutes(mux, runner)
	admin := http.NewServeMux()
	lifecycle.AdminRoutes(admin, runner, reg, lifecycle.AdminOptions{Pprof: cfg.Debug.Pprof})
	adminServer, _ := lifecycle.HTTPServer("collector admin http", s.AdminAddr, admin)
	guard, err := auth.New(auth.Options{Keys: s.Auth.Keys, UserTokenKey: []byte(s.Auth.UserTokenKey),
		Now: now, Logger: logger, Registerer: reg})
	if err != nil {
		refuse := lifecycle.Part{Name: "collector access control",
			Start: func(context.Context) error { return err }, Stop: func(context.Context) error { return nil }}
		return mux, []lifecycle.Part{refuse}
	}
	logger.Info("API access control on", "keys", len(s.Auth.Keys), "admin_addr", s.AdminAddr)
	return guard.Wrap(mux, auth.CollectorRoutes()), []lifecycle.Part{adminServer}
}
