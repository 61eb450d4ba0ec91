// Package chembed runs the real ClickHouse engine in-process (a chDB session
// on a data directory) behind ClickHouse's HTTP interface, so the rest of
// tally talks to it through clickhouse-go/v2 exactly as to a ClickHouse
// server, and curl or a dashboard can query it too.
//
// It is the only package allowed to import chdb-go, whose init panics
// unless libchdb.so is found (CHDB_LIB_PATH). A Server owns the process's
// single chDB session, its listener and its serving goroutine from Start
// until Close. Requests are served concurrently but reach the engine one at
// a time, pipeline calls before outside ones, and the settings, query
// parameters and current database of one request never carry over to the
// next.
//
// Two users exist: the pipeline user, the engine's administrator, which
// must have a password, and a read-only dashboards user whose statements the
// engine's own parser vets (guard.go) and whose queries run with readonly=1
// and time, memory and result limits the client cannot raise. A GET only
// reads, whoever sends it. Web pages in a browser are kept out
// (platform/webguard). Unlike a ClickHouse server it has no sessions
// (session_id) or external data, and buffers each result before sending it.
package chembed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures Start.
type Config struct {
	// DataDir is the chDB session path; it is created if missing. One
	// process at a time may use it.
	DataDir string
	// Addr is the listen address; default 127.0.0.1:8123. A zero port
	// picks a free one (see Server.Addr).
	Addr string
	// Logger is required.
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body after HTTP decoding; default 1 GiB.
	MaxBodyBytes int64
	// RequestTimeout bounds a request from its first byte to its last,
	// including the wait for the engine; it also becomes the engine's
	// max_execution_time for pipeline queries. Default 5 minutes.
	RequestTimeout time.Duration
	// Pipeline is the user tally's components connect as; Name defaults to
	// "default". On a loopback address it may have no password.
	Pipeline User
	// Readonly is the dashboards user; Name defaults to "dashboards".
	Readonly User
	// Limits bound the dashboards user's queries.
	Limits Limits
	// CORSOrigins are the browser origins that may read answers
	// (Access-Control-Allow-Origin); none by default, never a wildcard.
	CORSOrigins []string
	// BodyTimeout bounds the time from a request's first byte to the last
	// byte of its body; default 30s. A client trickling a body is cut off.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long; default 30s.
	IdleTimeout time.Duration
	// MaxOutsideRequests bounds the dashboards user's requests in progress;
	// one more is answered 503 at once. Default 8.
	MaxOutsideRequests int
	// MaxPipelineBodies bounds the pipeline requests reading their bodies
	// at once; more wait. Default 32.
	MaxPipelineBodies int
	// Registry, if set, receives the engine's busy time and statement
	// counts by statement kind and table (docs/PERFORMANCE.md, "How to profile", reads them
	// to tell what the serialized engine spends its time on).
	Registry prometheus.Registerer
}

const (
	defaultAddr           = "127.0.0.1:8123"
	defaultMaxBodyBytes   = 1 << 30
	defaultRequestTimeout = 5 * time.Minute
	defaultBodyTimeout    = 30 * time.Second
	defaultIdleTimeout    = 30 * time.Second
	defaultMaxOutside     = 8
	defaultMaxBodies      = 32
	readHeaderTimeout     = 10 * time.Second
)

// Server is a running chembed instance.
type Server struct {
	cfg      Config
	log      *slog.Logger
	eng      *engine
	ln       net.Listener
	http     *http.Server
	served   chan struct{}
	spoolDir string
	accounts []account
	outside  chan struct{} // a token per dashboards request in progress
	bodies   chan struct{} // a token per pipeline request reading its body

	closeOnce sync.Once
	closeErr  error
}

// withDefaults fills in every zero field that has a default.
func (cfg *Config) withDefaults() {
	orDefault(&cfg.Addr, defaultAddr)
	orDefault(&cfg.MaxBodyBytes, defaultMaxBodyBytes)
	orDefault(&cfg.RequestTimeout, defaultRequestTimeout)
	orDefault(&cfg.BodyTimeout, defaultBodyTimeout)
	orDefault(&cfg.IdleTimeout, defaultIdleTimeout)
	orDefault(&cfg.MaxOutsideRequests, defaultMaxOutside)
	orDefault(&cfg.MaxPipelineBodies, defaultMaxBodies)
	orDefault(&cfg.Pipeline.Name, "default")
	orDefault(&cfg.Readonly.Name, "dashboards")
	orDefault(&cfg.Limits.MaxExecutionTime, defaultMaxExecutionTime)
	orDefault(&cfg.Limits.MaxResultRows, defaultMaxResultRows)
	orDefault(&cfg.Limits.MaxResultBytes, defaultMaxResultBytes)
	orDefault(&cfg.Limits.MaxMemoryUsage, defaultMaxMemoryUsage)
	orDefault(&cfg.Limits.MaxRowsToRead, defaultMaxRowsToRead)
}

// orDefault sets *v to def unless it is above zero (or, for a string, set).
func orDefault[T int | int64 | uint64 | time.Duration | string](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}

// Start opens the chDB session on cfg.DataDir, listens on cfg.Addr and
// serves in a goroutine that Close stops.
func Start(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("start chembed: Config.DataDir is required")
	}
	if cfg.Logger == nil {
		return nil, errors.New("start chembed: Config.Logger is required")
	}
	cfg.withDefaults()
	accounts, err := newAccounts(cfg)
	if err != nil {
		return nil, fmt.Errorf("start chembed: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("start chembed: listen on %s: %w", cfg.Addr, err)
	}
	// A query the engine is running cannot be interrupted from outside, so
	// the engine has to stop it itself when the request's time is up.
	seconds := int64((cfg.RequestTimeout + time.Second - 1) / time.Second)
	baseline := map[string]string{"max_execution_time": strconv.FormatInt(seconds, 10)}
	eng, err := openEngine(cfg.DataDir, baseline, cfg.Logger)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("start chembed: %w", err)
	}
	if cfg.Registry != nil {
		busy := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_chembed_engine_seconds_total",
			Help: "Seconds the embedded engine ran statements (it runs one at a time), by statement kind and table."}, []string{"kind", "table"})
		n := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_chembed_statements_total",
			Help: "Statements the embedded engine ran, by statement kind and table."}, []string{"kind", "table"})
		if err := errors.Join(cfg.Registry.Register(busy), cfg.Registry.Register(n)); err != nil {
			eng.close()
			_ = ln.Close()
			return nil, fmt.Errorf("start chembed: %w", err)
		}
		eng.observe = func(c call, d time.Duration) {
			busy.WithLabelValues(c.kind, c.table).Add(d.Seconds())
			n.WithLabelValues(c.kind, c.table).Inc()
		}
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		eng:      eng,
		ln:       ln,
		served:   make(chan struct{}),
		spoolDir: pickSpoolDir(),
		accounts: accounts,
		outside:  make(chan struct{}, cfg.MaxOutsideRequests),
		bodies:   make(chan struct{}, cfg.MaxPipelineBodies),
	}
	handler, err := s.browserChecks()
	if err != nil {
		eng.close()
		_ = ln.Close()
		return nil, fmt.Errorf("start chembed: CORS origins: %w", err)
	}
	s.http = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		// Each request moves its own deadlines (ServeHTTP); these bound
		// the header and body, and a connection's idle time.
		ReadTimeout:  cfg.BodyTimeout,
		WriteTimeout: cfg.RequestTimeout + writeSlack(cfg.RequestTimeout),
		IdleTimeout:  cfg.IdleTimeout,
		ErrorLog:     slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.served)
		if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("chembed stopped serving", "addr", ln.Addr().String(), "err", err)
		}
	}()
	s.log.Info("chembed serving ClickHouse HTTP", "addr", ln.Addr().String(), "data_dir", cfg.DataDir, "engine_version", eng.version)
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting connections, waits for in-flight requests until
// ctx is done (then cuts them off), and closes the chDB session. It is
// safe to call more than once; later calls return the first result.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		var errs []error
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close chembed: wait for requests: %w", err))
			_ = s.http.Close()
		}
		<-s.served
		if err := s.eng.close(); err != nil {
			errs = append(errs, fmt.Errorf("close chembed: %w", err))
		}
		s.closeErr = errors.Join(errs...)
		s.log.Info("chembed closed", "addr", s.ln.Addr().String())
	})
	return s.closeErr
}

// pickSpoolDir prefers shared memory for INSERT data on its way to the
// engine: the file is written once, read once and deleted.
func pickSpoolDir() string {
	if f, err := os.CreateTemp("/dev/shm", "chembed-probe-*"); err == nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return "/dev/shm"
	}
	return os.TempDir()
}

// writeSlack is the time to send an answer after the engine used all of
// RequestTimeout, even if that answer is the timeout.
func writeSlack(requestTimeout time.Duration) time.Duration {
	return max(10*time.Second, requestTimeout/2)
}

// ServeHTTP routes ClickHouse's HTTP endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// net/http keeps a connection's deadlines across keep-alive requests;
	// every request sets its own so none inherits an expired one. Until
	// its body is in, a request may only read for BodyTimeout.
	start := time.Now()
	deadline := start.Add(s.cfg.RequestTimeout)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(start.Add(min(s.cfg.BodyTimeout, s.cfg.RequestTimeout)))
	_ = rc.SetWriteDeadline(deadline.Add(writeSlack(s.cfg.RequestTimeout)))
	switch r.URL.Path {
	case "/", "":
		if r.Method == http.MethodOptions {
			// A browser dashboard's CORS preflight before a query with
			// add_http_cors_header=1; only configured origins get an answer
			// that lets them go on.
			if !s.allowOrigin(w, r) {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Content-Encoding, Accept-Encoding, X-ClickHouse-User, X-ClickHouse-Key, X-ClickHouse-Format, X-ClickHouse-Database")
			h.Set("Access-Control-Max-Age", "86400")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		s.serveQuery(w, r, rc, deadline)
	case "/ping", "/replicas_status":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, newError(http.StatusMethodNotAllowed, codeBadArguments, "%s %s is not allowed; use GET", r.Method, r.URL.Path))
			return
		}
		writeOK(w)
	default:
		writeError(w, newError(http.StatusNotFound, codeBadArguments,
			"there is no handler for %s; use / for queries and /ping for health checks", r.URL.Path))
	}
}

func writeOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.Header().Set("Content-Length", "4")
	_, _ = io.WriteString(w, "Ok.\n")
}

func (s *Server) serveQuery(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, deadline time.Time) {
	started := time.Now()
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	who, ok := s.admit(w, r)
	if !ok {
		return
	}
	if who == roleReadonly {
		defer func() { <-s.outside }()
	}
	opts, perr := parseOptions(r.URL.Query())
	rq := &request{s: s, w: w, queryID: opts.queryID}
	if rq.queryID == "" {
		rq.queryID = newQueryID()
	}
	w.Header().Set("X-ClickHouse-Query-Id", rq.queryID)
	w.Header().Set("X-ClickHouse-Timezone", s.eng.tzName)
	if opts.cors {
		s.allowOrigin(w, r)
	}
	defer func() {
		s.log.Debug("chembed query", "query_id", rq.queryID, "kind", rq.kind, "status", rq.status, "duration", time.Since(started))
	}()
	if perr != nil {
		rq.fail(perr)
		return
	}
	c, maxBody, e := s.newCall(r, who, opts)
	if e != nil {
		rq.fail(e)
		return
	}
	p, err := s.readBody(ctx, w, r, opts, maxBody, who, started)
	rq.spool = p.spool
	defer func() {
		if p.spool == "" {
			return
		}
		if err := os.Remove(p.spool); err != nil {
			s.log.Warn("remove INSERT spool file", "path", p.spool, "err", err)
		}
	}()
	if err != nil {
		rq.fail(asChError(err, http.StatusBadRequest, codeBadArguments))
		return
	}
	// The body is in: from here on, reading only watches for the client
	// going away. That read must outlast the write deadline: if it timed
	// out first, net/http would cancel the context of every later request
	// on this keep-alive connection.
	_ = rc.SetReadDeadline(deadline.Add(2 * writeSlack(s.cfg.RequestTimeout)))
	rq.kind = p.st.kind
	if p.sql == "" && r.Method != http.MethodPost {
		writeOK(w) // what ClickHouse answers to GET / without a query
		return
	}
	if e := validate(p, opts); e != nil {
		rq.fail(e)
		return
	}
	c.sql, c.kind, c.table = p.sql, p.st.kind, statementTable(p.sql, who)
	if c.priority == pipelineWrite {
		c.priority = pipelinePriority(c.kind)
	}
	out, err := s.eng.run(ctx, c)
	if err != nil {
		rq.fail(asChError(err, http.StatusInternalServerError, codeStdException))
		return
	}
	rq.answer(r, opts, p.st, c.format, out)
}

// request is one query request's answer in the making.
type request struct {
	s       *Server
	w       http.ResponseWriter
	queryID string
	kind    string
	status  int
	spool   string // its INSERT data's spool file, if any
}

// fail answers e; the spool file's path is ours, not the client's business.
func (rq *request) fail(e *chError) {
	rq.status = e.status
	if rq.spool != "" && strings.Contains(e.text, rq.spool) {
		e.text = strings.ReplaceAll(e.text, rq.spool, "<request data>")
	}
	if e.code == codeStdException {
		rq.s.log.Warn("chembed request failed", "query_id", rq.queryID, "err", e.text)
	}
	writeError(rq.w, e)
}

// admit checks the method and the credentials, and takes one of the outside
// requests' slots for the dashboards user (the caller gives it back). It
// answers the request itself when it refuses it.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (role, bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost && r.Method != http.MethodHead {
		writeError(w, newError(http.StatusMethodNotAllowed, codeBadArguments, "method %s is not allowed; use GET or POST", r.Method))
		return 0, false
	}
	who, e := s.authenticate(r)
	if e != nil {
		if e.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Basic realm="ClickHouse", charset="UTF-8"`)
		}
		writeError(w, e)
		return 0, false
	}
	if who == roleReadonly {
		select {
		case s.outside <- struct{}{}:
		default:
			writeError(w, newError(http.StatusServiceUnavailable, codeTooManySimultaneous, "Too many simultaneous queries from user %s. Maximum: %d", s.cfg.Readonly.Name, s.cfg.MaxOutsideRequests))
			return 0, false
		}
	}
	return who, true
}

// newCall is the engine call for a request, without its SQL yet, and the
// bound on its body: an outside user's limits and place in line, and, as
// ClickHouse does, reads only for a GET whoever sends it (chDB's readonly=2
// still lets INSERT INTO FUNCTION and INTO OUTFILE write files, so a GET is
// vetted like an outside statement).
func (s *Server) newCall(r *http.Request, who role, opts options) (call, int64, *chError) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		return call{}, 0, newError(http.StatusNotImplemented, codeNotImplemented, "external data (multipart/form-data) is not supported by the embedded server")
	}
	c := call{database: opts.database, params: opts.params, format: opts.format, priority: pipelineWrite,
		settings: s.pipelineSettings(opts.settings), vet: r.Method != http.MethodPost}
	if c.format == "" {
		c.format = "TabSeparated"
	}
	if c.vet || opts.readonly {
		// A URL readonly=1 is a read-only request too, vetted the same way.
		c.vet, c.readonly = true, "2"
	}
	if who != roleReadonly {
		return c, s.cfg.MaxBodyBytes, nil
	}
	var e *chError
	if c.settings, c.limits, e = s.dashboardsSettings(opts.settings); e != nil {
		return call{}, 0, e
	}
	c.priority, c.vet, c.readonly = outsideLast, true, "1"
	c.maxOutput = int(min(s.cfg.Limits.MaxResultBytes, 1<<40))*2 + 1<<20
	return c, min(s.cfg.MaxBodyBytes, maxOutsideQueryBytes), nil
}

// readBody reads the request's SQL and spools INSERT data. The pipeline's
// bodies take a slot first, waiting within the body's own time; outside
// requests are bounded by their own slots, and their statement is read whole
// (they may not insert), so nothing of it is spooled.
func (s *Server) readBody(ctx context.Context, w http.ResponseWriter, r *http.Request, opts options, maxBody int64, who role, started time.Time) (plan, error) {
	maxQuery := min(maxBody, maxOutsideQueryBytes)
	if who == rolePipeline {
		if !s.takeBodySlot(ctx, started) {
			return plan{}, newError(http.StatusServiceUnavailable, codeTooManySimultaneous, "too many requests sending their bodies at once (%d)", s.cfg.MaxPipelineBodies)
		}
		defer func() { <-s.bodies }()
		maxQuery = min(maxBody, maxPipelineQueryBytes)
	}
	body, closeBody, err := s.requestBody(w, r, opts, maxBody)
	if err != nil {
		return plan{}, asChError(err, http.StatusBadRequest, codeCannotDecompress)
	}
	defer closeBody()
	return s.plan(opts, body, int(maxQuery), who == rolePipeline)
}

// answer sends a result in the format the statement asked for, re-encoded
// for the client's protocol revision and compressed as it asked.
func (rq *request) answer(r *http.Request, opts options, st statement, format string, out output) {
	if st.insert == nil && st.format != "" {
		format = st.format
	}
	data, err := out.data, error(nil)
	if len(data) > 0 && strings.EqualFold(format, "Native") && opts.clientRevision > 0 {
		if data, err = reencodeNative(data, opts.clientRevision, rq.s.eng.tz); err != nil {
			rq.fail(newError(http.StatusInternalServerError, codeStdException, "re-encode Native result for protocol revision %d: %v", opts.clientRevision, err))
			return
		}
	}
	if opts.compress && len(data) > 0 {
		if data, err = compressBlocks(data, opts.blockMethod); err != nil {
			rq.fail(newError(http.StatusInternalServerError, codeStdException, "%v", err))
			return
		}
	}
	h := rq.w.Header()
	h.Set("Content-Type", contentType(format, opts.compress))
	h.Set("X-ClickHouse-Format", format)
	h.Set("X-ClickHouse-Summary", fmt.Sprintf(`{"read_rows":"%d","read_bytes":"%d","elapsed_ns":"%d"}`,
		out.rowsRead, out.bytesRead, out.elapsed.Nanoseconds()))
	rq.status = http.StatusOK
	if enc := negotiateEncoding(r.Header.Get("Accept-Encoding")); opts.httpCompression && enc != "" && len(data) > 0 {
		h.Set("Content-Encoding", enc)
		h.Add("Vary", "Accept-Encoding")
		rq.w.WriteHeader(http.StatusOK)
		err = encodeBody(rq.w, enc, data)
	} else {
		h.Set("Content-Length", strconv.Itoa(len(data)))
		rq.w.WriteHeader(http.StatusOK)
		_, err = rq.w.Write(data)
	}
	if err != nil {
		rq.s.log.Debug("write chembed response", "query_id", rq.queryID, "err", err)
	}
}

// takeBodySlot waits for one of the pipeline's body slots no longer than
// the body itself may take.
func (s *Server) takeBodySlot(ctx context.Context, started time.Time) bool {
	select {
	case s.bodies <- struct{}{}:
		return true
	default:
	}
	ctx, cancel := context.WithDeadline(ctx, started.Add(min(s.cfg.BodyTimeout, s.cfg.RequestTimeout)))
	defer cancel()
	select {
	case s.bodies <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// asChError keeps a *chError as it is and gives anything else the status
// and code of the stage that failed.
func asChError(err error, status, code int) *chError {
	var ce *chError
	if errors.As(err, &ce) {
		return ce
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return newError(http.StatusRequestEntityTooLarge, codeLimitExceeded, "request body exceeds %d bytes", tooBig.Limit)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return newError(http.StatusRequestTimeout, codeTimeoutExceeded, "%v", err)
	}
	return newError(status, code, "%v", err)
}

// requestBody returns the body with the size limit applied, HTTP
// Content-Encoding undone and, with decompress=1, native blocks decoded.
func (s *Server) requestBody(w http.ResponseWriter, r *http.Request, opts options, maxBytes int64) (io.Reader, func(), error) {
	limited := http.MaxBytesReader(w, r.Body, maxBytes)
	body, closeDecoder, err := decodeBody(limited, r.Header.Get("Content-Encoding"))
	if err != nil {
		return nil, nil, fmt.Errorf("decode request body: %w", err)
	}
	encoded := body != io.Reader(limited)
	// A decoder can inflate past the wire limit; bound the decoded size too.
	body = &limitedBody{r: body, left: maxBytes, limit: maxBytes}
	if opts.decompress {
		body = newBlockReader(body, int(min(maxBytes, 1<<30)))
		encoded = true
	}
	if encoded {
		body = decodingReader{body}
	}
	return body, closeDecoder, nil
}

// decodingReader reports a failure to decode the body as ClickHouse's
// CANNOT_DECOMPRESS, leaving size limits and timeouts as they are.
type decodingReader struct{ r io.Reader }

func (d decodingReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err == nil || errors.Is(err, io.EOF) {
		return n, err
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) || errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	return n, newError(http.StatusBadRequest, codeCannotDecompress, "decompress request body: %v", err)
}

// limitedBody fails, rather than truncates, a body that exceeds its limit.
type limitedBody struct {
	r     io.Reader
	left  int64
	limit int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		if n, err := l.r.Read(one[:]); n > 0 || err != nil {
			if n > 0 {
				return 0, &http.MaxBytesError{Limit: l.limit}
			}
			return 0, err
		}
		return 0, nil
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// plan is the SQL the engine will run for a request.
type plan struct {
	sql   string
	st    statement
	spool string // file holding INSERT data; removed after the request
}

// plan assembles the request's SQL as ClickHouse does: the query parameter,
// a newline, then the body. When that makes an INSERT with inline data, the
// data goes to a spool file (binary formats cannot travel inside the query,
// which chDB receives as a C string) and the statement reads it with FROM
// INFILE. check sees the statement (without INSERT data) first.
func (s *Server) plan(opts options, body io.Reader, maxQuery int, inserts bool) (plan, error) {
	if opts.query != "" {
		head := opts.query + "\n"
		if st := scanStatement(head); st.insert != nil {
			rest := io.MultiReader(strings.NewReader(head[st.insert.dataStart:]), body)
			return s.spoolInsert(head, st, rest, inserts)
		}
		rest, truncated, err := readHead(body, maxQuery)
		if err != nil {
			return plan{}, fmt.Errorf("read request body: %w", err)
		}
		if truncated {
			return plan{}, queryTooLarge(maxQuery)
		}
		sql := opts.query
		if len(rest) > 0 {
			sql += "\n" + string(rest)
		}
		return plan{sql: sql, st: scanStatement(sql)}, nil
	}
	// Only the statement is held in memory; an INSERT's data streams on
	// to the spool file.
	all, truncated, err := readHead(body, maxQuery)
	if err != nil {
		return plan{}, fmt.Errorf("read request body: %w", err)
	}
	sql := string(all)
	st := scanStatement(sql)
	if st.insert == nil || truncated && st.insert.dataStart > maxQuery/2 {
		// A statement cut short could end anywhere, even in what looks
		// like the start of INSERT data.
		if truncated {
			return plan{}, queryTooLarge(maxQuery)
		}
		return plan{sql: sql, st: st}, nil
	}
	rest := io.MultiReader(strings.NewReader(sql[st.insert.dataStart:]), body)
	return s.spoolInsert(sql[:st.insert.dataStart], st, rest, inserts)
}

// readHead reads up to n+1 bytes: more than n means the input is longer
// than n (the extra byte is kept, for a caller that streams on).
func readHead(r io.Reader, n int) ([]byte, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(n)+1))
	return b, len(b) > n, err
}

func queryTooLarge(n int) *chError {
	return newError(http.StatusRequestEntityTooLarge, codeLimitExceeded, "query text exceeds %d bytes; send large INSERT data after a FORMAT clause", n)
}

// spoolInsert writes an INSERT's data to a spool file, for a user who may
// insert; for another, it refuses before reading any data.
func (s *Server) spoolInsert(head string, st statement, data io.Reader, inserts bool) (plan, error) {
	if !inserts {
		return plan{}, newError(http.StatusForbidden, codeReadonly, "INSERT: Cannot execute query in readonly mode")
	}
	path, err := s.spool(data)
	if err != nil {
		return plan{spool: path}, err
	}
	return plan{sql: st.insert.rewrite(head, path), st: st, spool: path}, nil
}

// spool copies INSERT data to a new file and returns its path; on error
// the path (if any) still needs removing.
func (s *Server) spool(data io.Reader) (string, error) {
	f, err := os.CreateTemp(s.spoolDir, "chembed-insert-*.data")
	if err != nil {
		return "", newError(http.StatusInternalServerError, codeStdException, "create INSERT spool file: %v", err)
	}
	if _, err := io.CopyBuffer(f, data, make([]byte, 256<<10)); err != nil {
		_ = f.Close()
		return f.Name(), fmt.Errorf("read INSERT data: %w", err)
	}
	if err := f.Close(); err != nil {
		return f.Name(), newError(http.StatusInternalServerError, codeStdException, "write INSERT spool file: %v", err)
	}
	return f.Name(), nil
}

// validate refuses what would run differently in the shared session than
// in a ClickHouse server, before the engine sees it.
func validate(p plan, opts options) *chError {
	st := p.st
	switch {
	case st.kind == "" && !st.multi:
		return newError(http.StatusBadRequest, codeSyntaxError, "Empty query")
	case st.multi:
		return newError(http.StatusBadRequest, codeSyntaxError, "Multi-statements are not allowed")
	case strings.IndexByte(p.sql, 0) >= 0:
		return newError(http.StatusBadRequest, codeSyntaxError, "query contains a zero byte")
	}
	if st.kind != "CREATE" && st.kind != "ATTACH" {
		for _, name := range st.placeholders {
			if !slices.ContainsFunc(opts.params, func(p setting) bool { return p.name == name }) {
				// The engine would still hold a value from an earlier request.
				return newError(http.StatusBadRequest, codeUnknownQueryParam, "Substitution `%s` is not set", name)
			}
		}
	}
	return nil
}

// contentType is what ClickHouse sends for a format.
func contentType(format string, compressed bool) string {
	if compressed {
		return "application/octet-stream"
	}
	f := strings.ToLower(format)
	switch {
	case strings.HasPrefix(f, "tabseparated") || strings.HasPrefix(f, "tsv"):
		return "text/tab-separated-values; charset=UTF-8"
	case strings.HasPrefix(f, "csv") && strings.Contains(f, "withnames"):
		return "text/csv; charset=UTF-8; header=present"
	case strings.HasPrefix(f, "csv"):
		return "text/csv; charset=UTF-8; header=absent"
	case strings.HasPrefix(f, "json"):
		return "application/json; charset=UTF-8"
	case f == "native" || strings.HasPrefix(f, "rowbinary") || f == "parquet" || strings.HasPrefix(f, "arrow") || f == "orc" || f == "avro" || f == "msgpack":
		return "application/octet-stream"
	}
	return "text/plain; charset=UTF-8"
}

// newQueryID makes a random UUID, as ClickHouse does for requests without
// a query_id.
func newQueryID() string { return uuid.NewString() }

// statementTable names the table a pipeline statement writes or first reads
// (the word after INTO, else after the first FROM), for the engine-time
// metrics; outside queries are all "outside", so their labels stay few.
func statementTable(sql string, who role) string {
	if who == roleReadonly {
		return "outside"
	}
	f := strings.Fields(sql)
	for _, kw := range []string{"INTO", "FROM"} {
		for i := 0; i+1 < len(f); i++ {
			if strings.EqualFold(f[i], kw) {
				return strings.Trim(f[i+1], "`\"(),;")
			}
		}
	}
	return ""
}
