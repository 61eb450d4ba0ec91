// Package migrate applies the ClickHouse migrations of package migrations in version order and
// records each in schema_migrations with its checksum. Applying twice changes nothing; a file
// changed after it was applied is an error, because the database no longer matches the code.
// Processes applying at once all get through: every statement is idempotent, and a migration
// whose statement failed beside another process's run is run again from its start (applyOne).
//
// A recorded migration is not proof that its objects still exist (a DROP TABLE by hand leaves
// the record behind), so Apply then checks that every table and view the migrations create is
// there, re-creates missing ones with their own idempotent CREATE ... IF NOT EXISTS statements
// and logs each, or fails naming the object when that is impossible.
package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/retry"
	"github.com/tallypipeline/tally/schemas/migrations"
)

// Migration is one numbered DDL file.
type Migration struct {
	Version    uint32
	Name       string
	Statements []string
	Checksum   string
}

// Load reads and parses the embedded migration files.
func Load() ([]Migration, error) {
	return load(migrations.FS)
}

func load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	var out []Migration
	for _, n := range names {
		num, rest, ok := strings.Cut(n, "_")
		v, err := strconv.ParseUint(num, 10, 32)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %s: want NNN_name.sql", n)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", n, err)
		}
		if len(out) > 0 && out[len(out)-1].Version >= uint32(v) {
			return nil, fmt.Errorf("migration %s: version %d is not above %d", n, v, out[len(out)-1].Version)
		}
		sum := sha256.Sum256(b)
		out = append(out, Migration{
			Version:    uint32(v),
			Name:       strings.TrimSuffix(rest, ".sql"),
			Statements: splitStatements(string(b)),
			Checksum:   hex.EncodeToString(sum[:]),
		})
	}
	return out, nil
}

// splitStatements drops -- comment lines and splits on semicolons ending a line.
func splitStatements(sql string) []string {
	var stmts []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			if s := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")); s != "" {
				stmts = append(stmts, s)
			}
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		stmts = append(stmts, s)
	}
	return stmts
}

// Apply brings the connection's database, on one server, up to the newest migration and
// returns that version.
func Apply(ctx context.Context, conn driver.Conn, logger *slog.Logger) (uint32, error) {
	return ApplyTo(ctx, conn, logger, Target{})
}

// ApplyTo is Apply for target t (one server or a cluster). A database migrated in the other
// shape is refused: its tables are not what t's statements expect.
func ApplyTo(ctx context.Context, conn driver.Conn, logger *slog.Logger, t Target) (uint32, error) {
	ms, err := t.migrations()
	if err != nil {
		return 0, err
	}
	if was, ok, err := recordedTarget(ctx, conn); err != nil {
		return 0, err
	} else if ok && was != t {
		return 0, fmt.Errorf("the database was migrated for %s; this process is configured for %s", was.describe(), t.describe())
	}
	if err := conn.Exec(ctx, t.migrationsTable()); err != nil {
		return 0, fmt.Errorf("create schema_migrations: %w", err)
	}
	applied, err := appliedChecksums(ctx, conn)
	if err != nil {
		return 0, err
	}
	var version uint32
	for _, m := range ms {
		version = m.Version
		if sum, ok := applied[m.Version]; ok {
			if sum != m.Checksum {
				return 0, fmt.Errorf("migration %03d_%s changed after it was applied (recorded checksum %.12s, file %.12s); add a new migration instead", m.Version, m.Name, sum, m.Checksum)
			}
			continue
		}
		if err := applyOne(ctx, conn, logger, m); err != nil {
			return 0, err
		}
	}
	if _, err := repair(ctx, conn, logger, ms); err != nil {
		return 0, err
	}
	return version, nil
}

// appliedChecksums returns the recorded checksum of every applied migration, by version: the
// latest record of a version, as the table's ReplacingMergeTree keeps it.
func appliedChecksums(ctx context.Context, conn driver.Conn) (map[uint32]string, error) {
	applied := map[uint32]string{}
	err := chclient.Pairs(ctx, conn, "SELECT version, argMax(checksum, applied_at) FROM schema_migrations GROUP BY version", nil,
		func(v uint32, sum string) { applied[v] = sum })
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	return applied, nil
}

// applyAttempts bounds how often a migration is run again after a failed statement.
const applyAttempts = 6

// applyOne runs m's statements and records it. Processes started together against a fresh
// database (collectors, aggregators, batch jobs) apply the same migration at once: each statement
// is idempotent, but a migration's sequence is not atomic (one process drops the table another is
// still copying from), so a failed statement is retried from the migration's start, with
// jittered backoff, unless another process has recorded the migration meanwhile.
func applyOne(ctx context.Context, conn driver.Conn, logger *slog.Logger, m Migration) error {
	attempt, elsewhere := 0, false
	err := retry.Do(ctx, time.Second, func() error {
		attempt++
		err := runStatements(ctx, conn, m)
		if err == nil {
			return nil
		}
		if attempt == applyAttempts {
			return retry.Stop(err)
		}
		var n uint64
		if qerr := conn.QueryRow(ctx, "SELECT count() FROM schema_migrations WHERE version = ?", m.Version).Scan(&n); qerr == nil && n > 0 {
			elsewhere = true
			return nil
		}
		return err
	}, func(err error, wait time.Duration) {
		logger.Warn("apply migration failed; another process may be applying it, retrying", "version", m.Version, "name", m.Name,
			"attempt", attempt, "pause", wait, "err", err)
	})
	if err != nil {
		return err
	}
	if elsewhere {
		logger.Info("migration applied by another process", "version", m.Version, "name", m.Name)
		return nil
	}
	if err := conn.Exec(ctx, "INSERT INTO schema_migrations (version, name, checksum) VALUES (?, ?, ?)", m.Version, m.Name, m.Checksum); err != nil {
		return fmt.Errorf("record migration %03d_%s: %w", m.Version, m.Name, err)
	}
	logger.Info("migration applied", "version", m.Version, "name", m.Name)
	return nil
}

func runStatements(ctx context.Context, conn driver.Conn, m Migration) error {
	for i, s := range m.Statements {
		if err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("apply migration %03d_%s statement %d: %w", m.Version, m.Name, i+1, err)
		}
	}
	return nil
}

// createRe matches a statement creating a table or view, capturing the object's name; dropRe a
// statement dropping one, and renameRe one renaming one (its old name is gone).
var (
	createRe = regexp.MustCompile(`(?is)^CREATE\s+(?:MATERIALIZED\s+VIEW|VIEW|TABLE)\s+IF\s+NOT\s+EXISTS\s+([A-Za-z_][A-Za-z0-9_]*)\b`)
	dropRe   = regexp.MustCompile(`(?is)^DROP\s+(?:VIEW|TABLE)\s+IF\s+EXISTS\s+([A-Za-z_][A-Za-z0-9_]*)\b`)
	renameRe = regexp.MustCompile(`(?is)^RENAME\s+TABLE\s+(?:IF\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)\s+TO\b`)
	alterRe  = regexp.MustCompile(`(?is)^ALTER\s+TABLE\s+([A-Za-z_][A-Za-z0-9_]*)\s`)
)

// schemaObject is a table or view the migrations leave in place, with the statements that make
// it as it is now (its CREATE, then every later ALTER of it, all idempotent) and the migration
// that created it.
type schemaObject struct {
	name  string
	stmts []string
	m     Migration
}

// objects returns what ms create and leave in place, in the order they were last created: an
// object a later migration drops or renames away is not expected, and one created again (a
// table replaced by a view of the same name) is expected as it was created last.
func objects(ms []Migration) []schemaObject {
	var out []schemaObject
	remove := func(name string) {
		for i, o := range out {
			if o.name == name {
				out = append(out[:i], out[i+1:]...)
				return
			}
		}
	}
	for _, m := range ms {
		for _, s := range m.Statements {
			if g := createRe.FindStringSubmatch(s); g != nil {
				remove(g[1])
				out = append(out, schemaObject{g[1], []string{s}, m})
			} else if g := alterRe.FindStringSubmatch(s); g != nil {
				for i := range out {
					if out[i].name == g[1] {
						out[i].stmts = append(out[i].stmts, s)
					}
				}
			} else if g := dropRe.FindStringSubmatch(s); g != nil {
				remove(g[1])
			} else if g := renameRe.FindStringSubmatch(s); g != nil {
				remove(g[1])
			}
		}
	}
	return out
}

// Repair re-creates every table or view of the migrations that is missing from the connection's
// database, in migration order (a table before the views reading it), and returns their names.
// The migrations' CREATE statements are idempotent, so running them again touches nothing that
// exists. A re-created table starts empty: what it held is gone with the drop. On a database
// migrated ON CLUSTER (schema_migrations says so), the cluster's statements are used.
func Repair(ctx context.Context, conn driver.Conn, logger *slog.Logger) ([]string, error) {
	t, _, err := recordedTarget(ctx, conn)
	if err != nil {
		return nil, err
	}
	ms, err := t.migrations()
	if err != nil {
		return nil, err
	}
	return repair(ctx, conn, logger, ms)
}

func repair(ctx context.Context, conn driver.Conn, logger *slog.Logger, ms []Migration) ([]string, error) {
	existing := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase()")
	if err != nil {
		return nil, fmt.Errorf("check schema: list tables: %w", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("check schema: scan table name: %w", err)
		}
		existing[n] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check schema: list tables: %w", err)
	}
	var repaired []string
	for _, o := range objects(ms) {
		if existing[o.name] {
			continue
		}
		for _, stmt := range o.stmts {
			if err := conn.Exec(ctx, stmt); err != nil {
				return repaired, fmt.Errorf("schema check: %s of migration %03d_%s is missing and re-creating it failed (restore it by hand, or drop the database to start over): %w",
					o.name, o.m.Version, o.m.Name, err)
			}
		}
		existing[o.name] = true
		repaired = append(repaired, o.name)
		logger.Warn("schema object was missing; re-created empty", "object", o.name, "migration", fmt.Sprintf("%03d_%s", o.m.Version, o.m.Name))
	}
	return repaired, nil
}
