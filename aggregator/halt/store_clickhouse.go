package halt

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
)

// Store keeps halts and decisions in ClickHouse (tables partition_halts and partition_resumes,
// migration 013), where the halting aggregator, the next owner and the operator's command all
// find them. It is safe for concurrent use.
type Store struct {
	Conn driver.Conn
}

// Record appends h.
func (s Store) Record(ctx context.Context, h *Halt) error {
	err := s.Conn.Exec(ctx, `INSERT INTO partition_halts (topic, partition, checkpoint, log_start, log_end, reason, owner, halted_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, h.Topic, h.Partition, h.Checkpoint, h.LogStart, h.LogEnd, string(h.Reason), h.Owner, h.At)
	if err != nil {
		return fmt.Errorf("record halt of %s/%d: %w", h.Topic, h.Partition, err)
	}
	return nil
}

// Decide appends d.
func (s Store) Decide(ctx context.Context, d Decision) error {
	err := s.Conn.Exec(ctx, `INSERT INTO partition_resumes (topic, partition, checkpoint, resume, log_start, log_end, note, decided_by, decided_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, d.Topic, d.Partition, d.Checkpoint, string(d.Resume), d.LogStart, d.LogEnd, d.Note, d.By, d.At)
	if err != nil {
		return fmt.Errorf("record decision to resume %s/%d: %w", d.Topic, d.Partition, err)
	}
	return nil
}

// Decided returns the newest decision for h's partition at h's checkpoint, if any.
func (s Store) Decided(ctx context.Context, h *Halt) (Decision, bool, error) {
	d := Decision{Topic: h.Topic, Partition: h.Partition, Checkpoint: h.Checkpoint}
	var resume string
	err := s.Conn.QueryRow(ctx, `SELECT resume, log_start, log_end, note, decided_by, decided_at FROM partition_resumes
		WHERE topic = ? AND partition = ? AND checkpoint = ? ORDER BY decided_at DESC LIMIT 1`,
		h.Topic, h.Partition, h.Checkpoint).Scan(&resume, &d.LogStart, &d.LogEnd, &d.Note, &d.By, &d.At)
	if isNoRows(err) {
		return Decision{}, false, nil
	}
	if err != nil {
		return Decision{}, false, fmt.Errorf("read decisions for %s/%d: %w", h.Topic, h.Partition, err)
	}
	d.Resume = Resume(resume)
	return d, true, nil
}

// Open returns, per partition, the newest halt that no decision answers yet.
func (s Store) Open(ctx context.Context) ([]*Halt, error) {
	var out []*Halt
	err := chclient.Each(ctx, s.Conn, `SELECT topic, partition, checkpoint, log_start, log_end, reason, owner, halted_at
		FROM partition_halts AS h
		WHERE (topic, partition, halted_at) IN (SELECT topic, partition, max(halted_at) FROM partition_halts GROUP BY topic, partition)
		  AND (topic, partition, checkpoint) NOT IN (SELECT topic, partition, checkpoint FROM partition_resumes)
		ORDER BY topic, partition`, nil, func(rows driver.Rows) error {
		h := &Halt{}
		var reason string
		if err := rows.Scan(&h.Topic, &h.Partition, &h.Checkpoint, &h.LogStart, &h.LogEnd, &reason, &h.Owner, &h.At); err != nil {
			return err
		}
		h.Reason = Reason(reason)
		out = append(out, h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read halted partitions: %w", err)
	}
	return out, nil
}

// Latest returns the newest halt recorded for topic/partition, if any.
func (s Store) Latest(ctx context.Context, topic string, partition int32) (*Halt, bool, error) {
	h := &Halt{Topic: topic, Partition: partition}
	var reason string
	err := s.Conn.QueryRow(ctx, `SELECT checkpoint, log_start, log_end, reason, owner, halted_at FROM partition_halts
		WHERE topic = ? AND partition = ? ORDER BY halted_at DESC LIMIT 1`, topic, partition).
		Scan(&h.Checkpoint, &h.LogStart, &h.LogEnd, &reason, &h.Owner, &h.At)
	if isNoRows(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read halts of %s/%d: %w", topic, partition, err)
	}
	h.Reason = Reason(reason)
	return h, true, nil
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
