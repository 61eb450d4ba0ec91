package counters

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Store reads and writes the namespaces table, counter_namespaces (migration 014): one row per
// change, the highest version wins, a deletion is a row with deleted = 1.
type Store struct {
	Conn driver.Conn
}

// put writes ns as its latest version.
func (s Store) put(ctx context.Context, ns Namespace, deleted bool) error {
	err := s.Conn.Exec(ctx, `INSERT INTO counter_namespaces (name, mode, retention_s, idempotency_s, writers, readers, generation, deleted, version, changed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, ns.Name, string(ns.Mode), uint64(ns.Retention/time.Second), uint64(ns.IdempotencyWindow/time.Second),
		nonNil(ns.Writers), nonNil(ns.Readers), ns.Generation, b2u(deleted), ns.Version, ns.ChangedAt)
	if err != nil {
		return fmt.Errorf("write namespace %s: %w", ns.Name, err)
	}
	return nil
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// All reads the live namespaces (the latest version of each, unless deleted).
func (s Store) All(ctx context.Context) (map[string]Namespace, error) {
	rows, err := s.Conn.Query(ctx, `SELECT name, argMax(mode, version), argMax(retention_s, version), argMax(idempotency_s, version),
			argMax(writers, version), argMax(readers, version), argMax(generation, version), argMax(deleted, version), max(version), argMax(changed_at, version)
		FROM counter_namespaces GROUP BY name`)
	if err != nil {
		return nil, fmt.Errorf("read namespaces: %w", err)
	}
	defer rows.Close()
	out := map[string]Namespace{}
	for rows.Next() {
		var ns Namespace
		var mode string
		var ret, idem uint64
		var deleted uint8
		if err := rows.Scan(&ns.Name, &mode, &ret, &idem, &ns.Writers, &ns.Readers, &ns.Generation, &deleted, &ns.Version, &ns.ChangedAt); err != nil {
			return nil, fmt.Errorf("scan namespace: %w", err)
		}
		if deleted == 1 {
			continue
		}
		ns.Mode, ns.Retention, ns.IdempotencyWindow = Mode(mode), time.Duration(ret)*time.Second, time.Duration(idem)*time.Second
		out[ns.Name] = ns
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read namespaces: %w", err)
	}
	return out, nil
}
