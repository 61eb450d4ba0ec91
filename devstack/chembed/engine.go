package chembed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chdb-io/chdb-go/chdb"
	"github.com/google/uuid"
)

// engine owns the process's chDB session. chDB keeps per-session state
// (current database, settings, query parameters) that a ClickHouse server
// keeps per request, so every call runs with the slot held and puts that
// state back before giving the slot up.
type engine struct {
	session  *chdb.Session
	lockFile *os.File
	gate     gate        // whoever holds it may use the session
	closing  atomic.Bool // set by close; waiting calls give up instead of running
	logger   *slog.Logger
	version  string
	tz       *time.Location
	tzName   string
	baseline map[string]string                // session-wide settings that resets return to
	guard    *guard                           // what outside SQL may not name, from the engine's own lists
	observe  func(c call, held time.Duration) // if set, told how long each call held the engine

	// Guarded by gate.
	closed    bool
	currentDB string // "" when unknown, e.g. after a USE statement
}

// lockName is held with flock for the life of a session. chDB locks its
// own status file too, but it reports a conflict only as "could not create
// a chdb connection" (the reason goes to stderr), and within one process it
// silently hands back the session that is already open.
const lockName = "chembed.lock"

func openEngine(dataDir string, baseline map[string]string, logger *slog.Logger) (*engine, error) {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("open chDB data dir %s: resolve path: %w", dataDir, err)
	}
	if strings.ContainsAny(dir, "?&\x00") {
		// chdb-go reads "?" as the start of connection options and "&" as their separator.
		return nil, fmt.Errorf("open chDB data dir %s: the path must not contain '?' or '&'", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open chDB data dir %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open chDB data dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("open chDB data dir %s: lock %s: %w; is another process using it?", dir, lockName, err)
	}
	if err := disableEngineSignalHandlers(); err != nil {
		logger.Warn("chDB keeps its signal handlers: a Go nil-pointer dereference will hang this process instead of panicking", "err", err)
	}
	config, err := writeConfig(dir)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("open chDB data dir %s: %w", dir, err)
	}
	conn := dir + "?config-file=" + config // chdb-go passes the option on as --config-file
	session, err := chdb.NewSession(conn)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("open chDB data dir %s: %w; is another process using it?", dir, err)
	}
	if session.Path() != conn {
		// Not ours to close: it belongs to whoever opened it first.
		_ = lock.Close()
		return nil, fmt.Errorf("open chDB data dir %s: this process already has a chDB session on %s and chDB allows one per process", dir, session.Path())
	}
	e := &engine{
		session:  session,
		lockFile: lock,
		logger:   logger,
		baseline: baseline,
		tz:       time.UTC,
		tzName:   "UTC",
	}
	if err := e.probe(); err != nil {
		session.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("open chDB data dir %s: %w", dir, err)
	}
	return e, nil
}

// probe reads what the HTTP interface reports about the server, closes
// the default database's window on the filesystem, learns the engine's
// table functions and engines, and applies the session-wide baseline
// settings.
func (e *engine) probe() error {
	res, err := e.session.Query("SELECT version(), timezone()", "TabSeparated")
	if err != nil {
		return fmt.Errorf("query engine version: %w", err)
	}
	line := strings.TrimSpace(string(res.Buf()))
	res.Free()
	version, tz, ok := strings.Cut(line, "\t")
	if !ok {
		return fmt.Errorf("query engine version: unexpected answer %q", line)
	}
	e.version = version
	if loc, err := time.LoadLocation(tz); err == nil {
		e.tz, e.tzName = loc, tz
	} else {
		e.logger.Warn("engine time zone unknown to Go; re-encoding Native results in UTC", "tz", tz, "err", err)
	}
	if err := e.closeFilesystemOverlay(); err != nil {
		return err
	}
	g, err := e.loadGuard()
	if err != nil {
		return err
	}
	e.guard = g
	if len(e.baseline) > 0 {
		settings := make([]setting, 0, len(e.baseline))
		for name, value := range e.baseline {
			settings = append(settings, setting{name, value})
		}
		if err := e.exec(setStatement(settings, nil)); err != nil {
			return fmt.Errorf("apply baseline settings: %w", err)
		}
	}
	// The baseline is everything the session has changed from the engine's
	// defaults now (chDB changes a few itself): verifySession returns to it.
	if e.baseline, err = e.changedSettings(); err != nil {
		return fmt.Errorf("read baseline settings: %w", err)
	}
	return nil
}

// closeFilesystemOverlay re-attaches the database "default" as a plain
// Atomic database. chDB opens it as an Overlay of its tables and of the
// whole filesystem, where any table name that is not a table is read as a
// file path (SELECT * FROM '/etc/passwd' works, even with readonly=1). The
// tables stay where they are: DETACH keeps their metadata, and the
// re-attached database has the same UUID and so the same directory. chDB
// rebuilds the overlay at every start, so this runs at every start.
func (e *engine) closeFilesystemOverlay() error {
	res, err := e.session.Query("SELECT engine, toString(uuid) FROM system.databases WHERE name = 'default'", "TabSeparated")
	if err != nil {
		return fmt.Errorf("inspect database default: %w", err)
	}
	line := strings.TrimSpace(string(res.Buf()))
	res.Free()
	engineName, id, _ := strings.Cut(line, "\t")
	if engineName != "Overlay" {
		return nil
	}
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return fmt.Errorf("inspect database default: unexpected UUID %q", id)
	}
	if err := e.exec("DETACH DATABASE default"); err != nil {
		return fmt.Errorf("detach the filesystem overlay of database default: %w", err)
	}
	if err := e.exec("ATTACH DATABASE default UUID '" + id + "' ENGINE = Atomic"); err != nil {
		return fmt.Errorf("re-attach database default without the filesystem: %w", err)
	}
	return nil
}

// call is one request's work for the engine.
type call struct {
	database string    // "" means default
	settings []setting // from the URL, in force for this call only
	params   []setting // query parameters, in force for this call only
	sql      string
	format   string // output format when the SQL has no FORMAT clause
	kind     string // statement kind, to undo what USE leaves behind
	table    string // for the engine-time metrics only
	priority priority
	// vet has the guard check the statement (reads only, nothing that
	// reaches outside the engine); the call runs its canonical text.
	vet bool
	// limits are applied after settings and readonly after both, so the
	// query can change neither (the engine refuses any setting change
	// under readonly=1, SETTINGS clauses included; readonly=2 allows
	// settings but no writes, as ClickHouse gives a GET request).
	limits   []setting
	readonly string
	// maxOutput bounds the formatted result this call may copy out of
	// the engine; 0 means no bound.
	maxOutput int
}

// output is a copy of a result: chDB's buffer is freed before the slot is
// given up, so nothing the engine owns outlives the call.
type output struct {
	data      []byte
	rowsRead  uint64
	bytesRead uint64
	elapsed   time.Duration
}

// run executes c with exclusive use of the session; it waits for its turn
// no longer than ctx allows.
func (e *engine) run(ctx context.Context, c call) (output, error) {
	if e.closing.Load() {
		return output{}, newError(http.StatusServiceUnavailable, codeAborted, "server is shutting down")
	}
	if err := e.gate.acquire(ctx, c.priority); err != nil {
		return output{}, newError(http.StatusServiceUnavailable, codeTimeoutExceeded, "request timed out waiting for the engine: %v", err)
	}
	defer e.gate.release()
	if e.observe != nil {
		defer func(t0 time.Time) { e.observe(c, time.Since(t0)) }(time.Now())
	}
	if e.closed || e.closing.Load() {
		return output{}, newError(http.StatusServiceUnavailable, codeAborted, "server is shutting down")
	}
	if err := ctx.Err(); err != nil {
		return output{}, newError(http.StatusServiceUnavailable, codeTimeoutExceeded, "request timed out waiting for the engine: %v", err)
	}
	return e.runHeld(c)
}

func (e *engine) runHeld(c call) (output, error) {
	if err := e.use(c.database); err != nil {
		return output{}, err
	}
	if c.vet || c.kind != "SELECT" && c.kind != "INSERT" && c.kind != "WITH" {
		// A statement but a query or an insert may leave a setting behind (a
		// SETTINGS clause lasts one query). Runs last, after every reset below.
		defer e.verifySession()
	}
	sql, settings, params := c.sql, c.settings, c.params
	if c.vet {
		// The guard's EXPLAIN AST needs the query parameters, and must
		// run before the caller's output settings and result limits.
		if err := e.apply(nil, c.params); err != nil {
			return output{}, err
		}
		defer e.reset(nil, names(c.params))
		var err error
		if sql, err = e.vet(sql); err != nil {
			return output{}, err
		}
		params = nil
	}
	if len(c.limits) > 0 || c.readonly != "" {
		settings = append(append([]setting(nil), c.settings...), c.limits...)
		if c.readonly != "" {
			settings = append(settings, setting{"readonly", c.readonly})
		}
	}
	if err := e.apply(settings, params); err != nil {
		return output{}, err
	}
	defer e.reset(names(settings), names(params))
	res, err := e.session.Query(sql, c.format)
	if c.kind == "USE" {
		e.currentDB = ""
	}
	if err != nil {
		e.drain()
		return output{}, engineError(err)
	}
	defer res.Free()
	if c.maxOutput > 0 && res.Len() > c.maxOutput {
		return output{}, newError(http.StatusInternalServerError, codeTooManyRowsOrBytes, "Limit for result exceeded, max bytes: %d, current bytes: %d", c.maxOutput, res.Len())
	}
	return output{
		data:      bytes.Clone(res.Buf()),
		rowsRead:  res.RowsRead(),
		bytesRead: res.BytesRead(),
		elapsed:   time.Duration(res.Elapsed() * float64(time.Second)),
	}, nil
}

// use makes db (default if empty) the session's current database.
func (e *engine) use(db string) error {
	if db == "" {
		db = "default"
	}
	if e.currentDB == db {
		return nil
	}
	if err := e.exec("USE " + quoteIdent(db)); err != nil {
		e.currentDB = ""
		return err
	}
	e.currentDB = db
	return nil
}

// apply sets settings and query parameters for one call; on error nothing
// of them is left set.
func (e *engine) apply(settings, params []setting) error {
	if len(settings)+len(params) == 0 {
		return nil
	}
	if err := e.exec(setStatement(settings, params)); err != nil {
		e.reset(names(settings), names(params))
		return err
	}
	return nil
}

func names(settings []setting) []string {
	out := make([]string, len(settings))
	for i, s := range settings {
		out[i] = s.name
	}
	return out
}

// verifySession compares the session's changed settings with the
// baseline and puts back any that differ: a statement can leave a setting
// behind in ways no scan of its text foresees (SET `readonl\x79` = 1).
func (e *engine) verifySession() {
	drift, err := e.drift()
	if err != nil || len(drift) == 0 {
		if err != nil {
			e.logger.Warn("check the engine session's settings", "err", err)
		}
		return
	}
	e.logger.Debug("engine session settings differ from the baseline after a statement; resetting them", "settings", drift)
	e.reset(drift, nil)
	if drift, err = e.drift(); err != nil || len(drift) > 0 {
		e.logger.Error("engine session settings could not be put back; later statements run with them", "settings", drift, "err", err)
	}
}

// drift lists the settings whose value in the session is not the baseline's.
func (e *engine) drift() ([]string, error) {
	now, err := e.changedSettings()
	var drift []string
	for name := range maps.Keys(now) {
		if want, ok := e.baseline[name]; !ok || want != now[name] {
			drift = append(drift, name)
		}
	}
	for name := range maps.Keys(e.baseline) {
		if _, ok := now[name]; !ok {
			drift = append(drift, name)
		}
	}
	return drift, err
}

// changedSettings is what the session has changed from the engine's defaults.
func (e *engine) changedSettings() (map[string]string, error) {
	out, err := e.query("SELECT name, value FROM system.settings WHERE changed")
	changed := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if name, value, ok := strings.Cut(line, "\t"); ok {
			changed[name] = value
		}
	}
	return changed, err
}

// exec runs a statement whose output does not matter.
func (e *engine) exec(sql string) error {
	res, err := e.session.Query(sql, "TabSeparated")
	if err != nil {
		e.drain()
		return engineError(err)
	}
	res.Free()
	return nil
}

// reset puts settings and parameters back. One statement does it when all
// names are known; if the engine refuses it (an unknown name from a failed
// request), each name is reset on its own so the good ones still are.
func (e *engine) reset(names, params []string) {
	if i := slices.Index(names, "readonly"); i >= 0 {
		// Under readonly the engine refuses to set anything else; only
		// "= DEFAULT" goes through. Lift it on its own first.
		if err := e.exec(resetStatement([]string{"readonly"}, e.baseline, nil)); err != nil {
			e.logger.Warn("reset readonly", "err", err)
		}
		names = slices.Delete(slices.Clone(names), i, i+1)
	}
	if len(names)+len(params) == 0 || e.exec(resetStatement(names, e.baseline, params)) == nil {
		return
	}
	// One name the engine does not know (from a request it refused) fails
	// the whole statement: reset each on its own.
	for _, n := range names {
		_ = e.exec(resetStatement([]string{n}, e.baseline, nil))
	}
	for _, p := range params {
		if err := e.exec(resetStatement(nil, nil, []string{p})); err != nil {
			e.logger.Warn("reset query parameter", "name", p, "err", err)
		}
	}
}

// drain runs a trivial query after a failed one. chDB can hand the rows a
// failed query had already produced to the next query on the session,
// prepended to its own result; this query absorbs them.
func (e *engine) drain() {
	res, err := e.session.Query("SELECT 1", "TabSeparated")
	if err != nil {
		e.logger.Warn("drain engine output after an error", "err", err)
		return
	}
	if n := res.Len(); n != 2 {
		e.logger.Debug("discarded output left over by a failed query", "bytes", n-2)
	}
	res.Free()
}

// close waits for the running call, then closes the session and releases
// the data directory. Calls still waiting for the slot give up.
func (e *engine) close() error {
	e.closing.Store(true)
	_ = e.gate.acquire(context.Background(), pipelineWrite)
	defer e.gate.release()
	if e.closed {
		return nil
	}
	e.closed = true
	e.session.Close()
	var errs []error
	if err := syscall.Flock(int(e.lockFile.Fd()), syscall.LOCK_UN); err != nil {
		errs = append(errs, fmt.Errorf("unlock data dir: %w", err))
	}
	if err := e.lockFile.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close data dir lock: %w", err))
	}
	return errors.Join(errs...)
}
