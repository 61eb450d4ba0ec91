package collector

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/collector/auth"
	"github.com/tallypipeline/tally/collector/collectorconf"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/platform/webguard"
)

// access puts the API's mux behind access control when auth is on, and says where the admin
// routes go: with auth on, /metrics and /debug/pprof/ move to their own server on
// collector.admin_addr (the returned part) and the API keeps only /healthz and /readyz; with
// auth off the API listens on loopback only (config refuses anything else), so they stay on it.
// Either way both servers refuse what web pages in a browser could send them (browserChecks).
func access(cfg *config.Config, s *collectorconf.Settings, mux *http.ServeMux, runner *lifecycle.Runner, logger *slog.Logger, reg *prometheus.Registry, now func() time.Time) (http.Handler, []lifecycle.Part) {
	if !s.AuthOn() {
		lifecycle.AdminRoutes(mux, runner, reg, lifecycle.AdminOptions{Pprof: cfg.Debug.Pprof})
		return browserChecks(s.Addr, mux), nil
	}
	lifecycle.HealthRoutes(mux, runner)
	admin := http.NewServeMux()
	lifecycle.AdminRoutes(admin, runner, reg, lifecycle.AdminOptions{Pprof: cfg.Debug.Pprof})
	adminServer, _ := lifecycle.HTTPServer("collector admin http", s.AdminAddr, browserChecks(s.AdminAddr, admin))
	guard, err := auth.New(auth.Options{Keys: s.Auth.Keys, UserTokenKey: []byte(s.Auth.UserTokenKey),
		Now: now, Logger: logger, Registerer: reg})
	if err != nil {
		refuse := lifecycle.Part{Name: "collector access control",
			Start: func(context.Context) error { return err }, Stop: func(context.Context) error { return nil }}
		return mux, []lifecycle.Part{refuse}
	}
	logger.Info("API access control on", "keys", len(s.Auth.Keys), "admin_addr", s.AdminAddr)
	return browserChecks(s.Addr, guard.Wrap(mux, auth.CollectorRoutes())), []lifecycle.Part{adminServer}
}

// browserChecks puts h, served on addr, behind the checks against web pages open in a browser
// on a machine that can reach it (docs/SECURITY.md, "Browsers"; platform/webguard): a POST, PUT
// or DELETE that another site's page sends gets 403 (no route needs one, the live page only
// reads), and on a loopback addr so does a request naming another host (DNS rebinding). Other
// addresses need API keys (config refuses auth off there).
func browserChecks(addr string, h http.Handler) http.Handler {
	guarded, _ := webguard.Wrap(h, webguard.Options{Addr: addr, Refuse: func(w http.ResponseWriter, r *http.Request, foreignHost bool) {
		if foreignHost {
			api.Error(w, http.StatusForbidden, "Host", fmt.Sprintf("is %q; a collector listening on loopback answers only localhost or a loopback IP (docs/SECURITY.md)", r.Host))
			return
		}
		api.Error(w, http.StatusForbidden, "", "cross-origin request refused: a page of another site may not send this to the collector (docs/SECURITY.md)")
	}})
	return guarded
}
