package migrate

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Script writes the SQL that brings a database up to the newest migration for t, for an
// operator who applies DDL by hand: schema_migrations first, then each migration above after,
// its statements followed by the row recording it, so that the components' own start (ApplyTo)
// finds it applied and runs nothing. Every statement is idempotent, as ApplyTo runs them.
func Script(w io.Writer, t Target, after uint32) error {
	ms, err := t.migrations()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "-- tally ClickHouse migrations for %s, after version %d.\n-- Run in the database the components use (clickhouse.database), in this order.\n\n", t.describe(), after)
	fmt.Fprintf(w, "%s;\n\n", strings.TrimSpace(t.migrationsTable()))
	for _, m := range ms {
		if m.Version <= after {
			continue
		}
		fmt.Fprintf(w, "-- %03d_%s\n", m.Version, m.Name)
		for _, s := range m.Statements {
			fmt.Fprintf(w, "%s;\n\n", strings.TrimSpace(s))
		}
		fmt.Fprintf(w, "INSERT INTO schema_migrations (version, name, checksum) VALUES (%d, '%s', '%s');\n\n", m.Version, m.Name, m.Checksum)
	}
	return nil
}

// State is one migration as a database has it.
type State struct {
	Version uint32
	Name    string
	// Status: "applied"; "pending" (not yet); "changed" (applied from a file that differs
	// from this build's, which ApplyTo refuses).
	Status string
}

// Status returns, for every migration of this build for t, whether conn's database has it.
func Status(ctx context.Context, conn driver.Conn, t Target) ([]State, error) {
	ms, err := t.migrations()
	if err != nil {
		return nil, err
	}
	applied := map[uint32]string{}
	if _, migrated, err := recordedTarget(ctx, conn); err != nil {
		return nil, err
	} else if migrated {
		if applied, err = appliedChecksums(ctx, conn); err != nil {
			return nil, err
		}
	}
	out := make([]State, len(ms))
	for i, m := range ms {
		out[i] = State{Version: m.Version, Name: m.Name, Status: "pending"}
		if sum, ok := applied[m.Version]; ok {
			out[i].Status = "applied"
			if sum != m.Checksum {
				out[i].Status = "changed"
			}
		}
	}
	return out, nil
}
