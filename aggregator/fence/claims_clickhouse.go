package fence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
)

// Table is a stream's claims table in ClickHouse: one row per claim, keyed (partition, epoch),
// with the claim's start in one column per end-offset column of the stream's batches.
type Table struct {
	Conn driver.Conn
	// Name is the table (partition_claims, click_partition_claims).
	Name string
	// Starts are the columns of a claim's start, in the order of Ends.
	Starts []string
	// Ends are the end-offset columns of the stream's batches, which the fence's SQL names.
	Ends []string
}

// Load reads partition p's claims into its fence.
func (t Table) Load(ctx context.Context, p int32) (Fence, error) {
	var cs []Claim
	err := chclient.Each(ctx, t.Conn, fmt.Sprintf(`SELECT epoch, claimed_at, %s FROM %s WHERE partition = ?`,
		strings.Join(t.Starts, ", "), t.Name), []any{uint16(p)}, func(rows driver.Rows) error {
		c := Claim{Start: make([]int64, len(t.Starts))}
		dest := []any{&c.Epoch, &c.At}
		for i := range c.Start {
			dest = append(dest, &c.Start[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		cs = append(cs, c)
		return nil
	})
	if err != nil {
		return Fence{}, fmt.Errorf("load claims of partition %d from %s: %w", p, t.Name, err)
	}
	return New(t.Ends, cs), nil
}

// Insert records claim c of partition p, made by owner at c.At.
func (t Table) Insert(ctx context.Context, p int32, c Claim, owner string) error {
	args := []any{uint16(p), c.Epoch, owner, c.At}
	for _, s := range c.Start {
		args = append(args, s)
	}
	q := fmt.Sprintf(`INSERT INTO %s (partition, epoch, owner, claimed_at, %s) VALUES (?, ?, ?, ?%s)`,
		t.Name, strings.Join(t.Starts, ", "), strings.Repeat(", ?", len(t.Starts)))
	if err := t.Conn.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("claim partition %d epoch %d in %s: %w", p, c.Epoch, t.Name, err)
	}
	return nil
}

// Open claims partition p for owner one epoch above its claims, starting where checkpoint says
// (it reads the checkpoint from the batches outside invalid, those the claims so far make
// invalid), then deletes from batches the rows of the batches the new claim makes invalid
// (zombies', whose records this owner replays), after undo when set (for what must read them
// first). It returns the checkpoint, the claim, and the partition's AnyInvalidSQL with it.
func Open[C any](ctx context.Context, t Table, b Batches, p int32, owner string, now func() time.Time,
	checkpoint func(invalid string) (C, []int64, error), undo func(cp C, invalid string) error) (cp C, c Claim, invalid string, err error) {
	f, err := t.Load(ctx, p)
	if err != nil {
		return cp, c, "", err
	}
	cp, start, err := checkpoint(f.AnyInvalidSQL())
	if err != nil {
		return cp, c, "", err
	}
	c = Claim{Epoch: f.MaxEpoch() + 1, Start: start, At: now()}
	if err := t.Insert(ctx, p, c, owner); err != nil {
		return cp, c, "", err
	}
	invalid = f.With(c).AnyInvalidSQL()
	if undo != nil {
		if err := undo(cp, invalid); err != nil {
			return cp, c, "", err
		}
	}
	return cp, c, invalid, b.Delete(ctx, p, invalid)
}

// MaxEpochs returns the newest claim epoch of each of ids that has a claim.
func (t Table) MaxEpochs(ctx context.Context, ids []int32) (map[int32]uint64, error) {
	ps := make([]uint16, len(ids))
	for i, id := range ids {
		ps[i] = uint16(id)
	}
	out, err := byPartition(ctx, t.Conn, fmt.Sprintf(`SELECT partition, max(epoch) FROM %s WHERE partition IN (?) GROUP BY partition`, t.Name), ps)
	if err != nil {
		return nil, fmt.Errorf("read claim epochs from %s: %w", t.Name, err)
	}
	return out, nil
}

// byPartition runs query, whose rows are a partition and a UInt64 of it, and returns the values
// by partition.
func byPartition(ctx context.Context, conn driver.Conn, query string, args ...any) (map[int32]uint64, error) {
	out := map[int32]uint64{}
	if err := chclient.Pairs(ctx, conn, query, args, func(p uint16, v uint64) { out[int32(p)] = v }); err != nil {
		return nil, err
	}
	return out, nil
}

// Batches is a stream's batch table as the fence's cleanup sees it: its rows carry the
// partition, the epoch and the end-offset columns a Fence's SQL names (Ends), and Marker selects
// the one marker row of each batch.
type Batches struct {
	Conn   driver.Conn
	Table  string
	Marker string   // e.g. ad_id = ''
	Ends   []string // as Table.Ends
}

// Written reports whether partition p's batch of epoch ending at end (one offset per column of
// Ends) is stored: after an attempt whose outcome is unknown (a timeout after the server
// committed), retrying it blindly would count it twice.
func (b Batches) Written(ctx context.Context, p int32, epoch uint64, end ...int64) (bool, error) {
	cond, args := "", []any{uint16(p), epoch}
	for i, col := range b.Ends {
		cond += fmt.Sprintf(" AND %s = ?", col)
		args = append(args, end[i])
	}
	var n uint64
	if err := b.Conn.QueryRow(ctx, fmt.Sprintf(`SELECT count() FROM %s WHERE %s AND partition = ? AND epoch = ?%s`, b.Table, b.Marker, cond),
		args...).Scan(&n); err != nil {
		return false, fmt.Errorf("look for the marker of partition %d epoch %d at %v in %s: %w", p, epoch, end, b.Table, err)
	}
	return n > 0, nil
}

// Invalid counts, per partition of invalid (partition -> its AnyInvalidSQL) that has any, the
// batches the fence makes invalid. One statement for them all: the check runs often and nearly
// always finds nothing.
func (b Batches) Invalid(ctx context.Context, invalid map[int32]string) (map[int32]uint64, error) {
	if len(invalid) == 0 {
		return nil, nil
	}
	conds := make([]string, 0, len(invalid))
	for p, sql := range invalid {
		conds = append(conds, fmt.Sprintf("(partition = %d AND (%s))", p, sql))
	}
	found, err := byPartition(ctx, b.Conn, fmt.Sprintf(`SELECT partition, count() FROM %s WHERE %s AND (%s) GROUP BY partition`,
		b.Table, b.Marker, strings.Join(conds, " OR ")))
	if err != nil {
		return nil, fmt.Errorf("look for zombie batches of %d partitions in %s: %w", len(invalid), b.Table, err)
	}
	return found, nil
}

// Delete deletes the rows of partition p's batches that invalid (its AnyInvalidSQL) selects.
func (b Batches) Delete(ctx context.Context, p int32, invalid string) error {
	if err := b.Conn.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE partition = %d AND (%s)`, b.Table, p, invalid)); err != nil {
		return fmt.Errorf("delete zombie batches of partition %d in %s: %w", p, b.Table, err)
	}
	return nil
}
