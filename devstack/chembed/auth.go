package chembed

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/tallypipeline/tally/platform/webguard"
)

// User is an account of the embedded server.
type User struct {
	Name     string
	Password string // empty: no password (refused on a non-loopback address)
}

// role is what an authenticated request may do.
type role uint8

const (
	// rolePipeline is tally's own user: anything inside the engine, first
	// in line for it.
	rolePipeline role = iota
	// roleReadonly is the dashboards user: reads within Limits, one
	// engine turn at a time, after any waiting pipeline call.
	roleReadonly
)

type account struct {
	name string
	hash [sha256.Size]byte
	role role
}

// Limits bound a dashboards query. Clients may ask for less, never more;
// zero fields take the defaults.
type Limits struct {
	// MaxExecutionTime becomes the engine's max_execution_time; default 3s.
	// It is also how long a pipeline call can wait behind an outside query.
	MaxExecutionTime time.Duration
	// MaxResultRows and MaxResultBytes become max_result_rows and
	// max_result_bytes (rows and uncompressed bytes of the result);
	// defaults 1,000,000 and 32 MiB. The formatted answer is also cut at
	// twice MaxResultBytes plus 1 MiB, whatever the format.
	MaxResultRows  uint64
	MaxResultBytes uint64
	// MaxMemoryUsage becomes max_memory_usage (bytes one query may hold in
	// the all-in-one's memory); default 512 MiB.
	MaxMemoryUsage uint64
	// MaxRowsToRead becomes max_rows_to_read; default 2,000,000,000.
	MaxRowsToRead uint64
}

const (
	defaultMaxExecutionTime = 3 * time.Second
	defaultMaxResultRows    = 1_000_000
	defaultMaxResultBytes   = 32 << 20
	defaultMaxMemoryUsage   = 512 << 20
	defaultMaxRowsToRead    = 2_000_000_000
	// maxOutsideQueryBytes bounds the SQL a dashboards request may send
	// (ClickHouse's own max_query_size is 256 KiB).
	maxOutsideQueryBytes = 1 << 20
	// maxPipelineQueryBytes bounds the SQL text (and VALUES data) of a
	// pipeline request, which is held in memory; other INSERT data streams
	// to a spool file. The largest queries tally sends inline 10,000 ids.
	maxPipelineQueryBytes = 8 << 20
)

// fixedCaps bound every outside query beside Limits: the engine's own
// threads and block size (an outside query shares the all-in-one's cores
// with counting), and sleep, which would hold a block past
// max_execution_time (the engine checks the time between blocks).
var fixedCaps = []setting{
	{"max_threads", "2"},
	{"max_block_size", "65536"},
	{"function_sleep_max_microseconds_per_block", "100000"},
	{"max_bytes_to_read", "68719476736"},
}

// newAccounts checks the users and hashes their passwords; comparing
// hashes keeps the comparison's time independent of the password length.
func newAccounts(cfg Config) ([]account, error) {
	if cfg.Pipeline.Name == cfg.Readonly.Name {
		return nil, fmt.Errorf("the pipeline and dashboards users are both named %q; give them different names", cfg.Pipeline.Name)
	}
	if cfg.Pipeline.Password == "" {
		// Anyone on the machine, or a web page through a browser on it,
		// could otherwise drop the pipeline's tables.
		return nil, fmt.Errorf("the pipeline user %q has no password: it administers the engine, so it needs one on every address (Config.Pipeline.Password; the embedded stack generates one)", cfg.Pipeline.Name)
	}
	if !webguard.LoopbackAddr(cfg.Addr) {
		if cfg.Readonly.Password == "" {
			return nil, fmt.Errorf("listen address %s is not a loopback address: set a password for the dashboards user %q (Config.Readonly.Password, embedded.dashboards_password) or listen on 127.0.0.1", cfg.Addr, cfg.Readonly.Name)
		}
	}
	return []account{
		{name: cfg.Pipeline.Name, hash: sha256.Sum256([]byte(cfg.Pipeline.Password)), role: rolePipeline},
		{name: cfg.Readonly.Name, hash: sha256.Sum256([]byte(cfg.Readonly.Password)), role: roleReadonly},
	}, nil
}

// authenticate finds the request's user the ways ClickHouse accepts them:
// HTTP basic auth, the X-ClickHouse-User and X-ClickHouse-Key headers, or
// the user and password URL parameters; none means "default" with no
// password. Using two ways at once is refused, as ClickHouse does.
func (s *Server) authenticate(r *http.Request) (role, *chError) {
	var (
		name, password string
		ways           int
	)
	if u, p, ok := r.BasicAuth(); ok {
		name, password = u, p
		ways++
	}
	if u := r.Header.Get("X-ClickHouse-User"); u != "" || r.Header.Get("X-ClickHouse-Key") != "" {
		name, password = u, r.Header.Get("X-ClickHouse-Key")
		ways++
	}
	q := r.URL.Query()
	if q.Has("user") || q.Has("password") {
		name, password = q.Get("user"), q.Get("password")
		ways++
	}
	if ways > 1 {
		return 0, newError(http.StatusForbidden, codeAuthFailed, "Invalid authentication: it is not allowed to use more than one way of passing credentials (basic auth, X-ClickHouse-User/Key headers, user/password parameters) at once")
	}
	if name == "" {
		name = "default"
	}
	given := sha256.Sum256([]byte(password))
	for _, a := range s.accounts {
		if a.name == name && subtle.ConstantTimeCompare(given[:], a.hash[:]) == 1 {
			return a.role, nil
		}
	}
	e := newError(http.StatusForbidden, codeAuthFailed, "%s: Authentication failed: password is incorrect, or there is no user with such name", strconv.Quote(name))
	if ways == 0 {
		// A browser asks for credentials on 401.
		e.status = http.StatusUnauthorized
	}
	return 0, e
}

// readonlySettings are the URL settings a dashboards request may pass:
// they shape the output, nothing else. The limits are handled apart
// (lowered, never raised), and anything else is refused as ClickHouse
// refuses setting changes under readonly=1.
var readonlySettings = map[string]bool{
	"join_use_nulls": true, "extremes": true, "log_comment": true, "session_timezone": true,
	"date_time_output_format": true, "enable_positional_arguments": true, "prefer_column_name_to_alias": true,
	"count_distinct_implementation": true, "final": true, "do_not_merge_across_partitions_select_final": true,
}

// readonlyPrefixes are families of output settings.
var readonlyPrefixes = []string{"output_format_", "format_csv_", "format_tsv_", "format_display_secondary_queries"}

// overflowModes are the settings choosing what a limit does when reached.
var overflowModes = map[string]bool{"timeout_overflow_mode": true, "result_overflow_mode": true, "read_overflow_mode": true}

// outsideCaps are the limits every dashboards query runs with, as settings.
func (l Limits) outsideCaps() []setting {
	caps := []setting{
		{"max_execution_time", strconv.FormatFloat(l.MaxExecutionTime.Seconds(), 'f', -1, 64)},
		{"max_result_rows", strconv.FormatUint(l.MaxResultRows, 10)},
		{"max_result_bytes", strconv.FormatUint(l.MaxResultBytes, 10)},
		{"max_memory_usage", strconv.FormatUint(l.MaxMemoryUsage, 10)},
		{"max_rows_to_read", strconv.FormatUint(l.MaxRowsToRead, 10)},
	}
	return append(caps, fixedCaps...)
}

// dashboardsSettings splits a dashboards request's URL settings into those
// it may pass and the limits the engine will enforce, lowered to what the
// client asked where it asked for less.
func (s *Server) dashboardsSettings(given []setting) (keep, limits []setting, e *chError) {
	limits = s.cfg.Limits.outsideCaps()
	modes := map[string]string{"timeout_overflow_mode": "throw", "result_overflow_mode": "throw", "read_overflow_mode": "throw"}
	for _, st := range given {
		if overflowModes[st.name] {
			if st.value != "throw" && st.value != "break" {
				return nil, nil, newError(http.StatusBadRequest, codeBadArguments, "%s %q is not throw or break", st.name, st.value)
			}
			modes[st.name] = st.value
			continue
		}
		if i := slices.IndexFunc(limits, func(c setting) bool { return c.name == st.name }); i >= 0 {
			limits[i].value = lower(limits[i].value, st.value)
			continue
		}
		if !readonlySettings[st.name] && !hasAnyPrefix(st.name, readonlyPrefixes) {
			return nil, nil, newError(http.StatusForbidden, codeReadonly, "Cannot modify '%s' setting in readonly mode", st.name)
		}
		keep = append(keep, st)
	}
	for _, name := range slices.Sorted(maps.Keys(modes)) {
		limits = append(limits, setting{name, modes[name]})
	}
	return keep, limits, nil
}

// lower is the client's value when it is a positive number below the cap.
func lower(limit, asked string) string {
	c, err1 := strconv.ParseFloat(limit, 64)
	a, err2 := strconv.ParseFloat(asked, 64)
	if err1 == nil && err2 == nil && a > 0 && a < c {
		return strconv.FormatFloat(a, 'f', -1, 64)
	}
	return limit
}

// pipelineSettings keeps a pipeline request's time limit within the
// request's own: past it nobody waits for the answer, but the engine would
// stay busy.
func (s *Server) pipelineSettings(given []setting) []setting {
	limit := s.cfg.RequestTimeout.Seconds()
	out := given[:0:0]
	for _, st := range given {
		if st.name == "max_execution_time" {
			if v, err := strconv.ParseFloat(st.value, 64); err != nil || v <= 0 || v > limit {
				st.value = strconv.FormatFloat(limit, 'f', -1, 64)
			}
		}
		out = append(out, st)
	}
	return out
}

// allowOrigin answers a CORS request only for a configured origin, never
// with a wildcard: a page from any other site gets no access to answers.
func (s *Server) allowOrigin(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	for _, o := range s.cfg.CORSOrigins {
		if o == origin {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			return true
		}
	}
	return false
}

// browserChecks keeps web pages in a browser on this machine out
// (platform/webguard): a cross-site POST is refused (the configured CORS
// origins are trusted), and on a loopback address so is a request naming
// another host (DNS rebinding). GET already only reads, with credentials.
func (s *Server) browserChecks() (http.Handler, error) {
	return webguard.Wrap(s, webguard.Options{Addr: s.cfg.Addr, TrustedOrigins: s.cfg.CORSOrigins,
		Refuse: func(w http.ResponseWriter, r *http.Request, foreignHost bool) {
			if foreignHost {
				writeError(w, accessDenied("host %q is not this machine: the server listens on loopback and answers only requests for localhost or a loopback address", r.Host))
				return
			}
			writeError(w, accessDenied("cross-site %s requests are not allowed", r.Method))
		}})
}
