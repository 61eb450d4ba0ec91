package fence

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
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
	cs, err := t.claims(ctx, "partition = ?", uint16(p))
	if err != nil {
		return Fence{}, fmt.Errorf("load claims of partition %d from %s: %w", p, t.Name, err)
	}
	return New(t.Ends, cs), nil
}

// claims reads the claims where cond holds.
func (t Table) claims(ctx context.Context, cond string, args ...any) (cs []Claim, err error) {
	err = chclient.Each(ctx, t.Conn, fmt.Sprintf(`SELECT epoch, owner, claimed_at, %s FROM %s WHERE %s`,
		strings.Join(t.Starts, ", "), t.Name, cond), args, func(rows driver.Rows) error {
		c := Claim{Start: make([]int64, len(t.Starts))}
		dest := []any{&c.Epoch, &c.Owner, &c.At}
		for i := range c.Start {
			dest = append(dest, &c.Start[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		cs = append(cs, c)
		return nil
	})
	return cs, err
}

// claimAttempts bounds how often a claimant that keeps losing its epoch to other claimants
// starts over.
const claimAttempts = 8

// Acquire claims partition p for owner: it loads the claims, has build make the new claim from
// their fence (build reads the checkpoint with it, and must write nothing), and records the claim
// unless another claimant recorded one of the same epoch since the load; then it starts over
// from a fresh load, after a short random pause. It returns the fence the claim was built on.
//
// Two claimants of one epoch would both count as current (every fence check compares epochs),
// and the one whose start is lower would make invalid the batches that the other's checkpoint
// counts as done: their records would be counted by nobody. So each epoch has exactly one claim
// (take), and a claim's checkpoint was read with every claim of a lower epoch in its fence.
func (t Table) Acquire(ctx context.Context, p int32, owner string, build func(Fence) (Claim, error)) (Fence, Claim, error) {
	// floor is above every epoch lost so far. The server also drops a claim whose epoch's row is
	// gone while its token is still remembered (rows deleted; a TRUNCATE forgets the tokens too):
	// without the floor the claimant would build that epoch again each time.
	var floor uint64
	for attempt := 1; ; attempt++ {
		f, err := t.Load(ctx, p)
		if err != nil {
			return Fence{}, Claim{}, err
		}
		c, err := build(f)
		if err != nil {
			return Fence{}, Claim{}, err
		}
		c.Epoch, c.Owner = max(c.Epoch, floor), owner
		won, err := t.take(ctx, p, c)
		if err != nil || won {
			return f, c, err
		}
		floor = c.Epoch + 1
		if attempt == claimAttempts {
			return Fence{}, Claim{}, fmt.Errorf("claim partition %d in %s: another claimant took the epoch %d times in a row", p, t.Name, attempt)
		}
		select {
		case <-ctx.Done():
			return Fence{}, Claim{}, fmt.Errorf("claim partition %d in %s: %w", p, t.Name, ctx.Err())
		case <-time.After(time.Duration(1+rand.IntN(20*attempt)) * time.Millisecond):
		}
	}
}

// take records claim c of partition p and reports whether c holds its epoch.
// The INSERT carries the partition and epoch as its deduplication token, so the server keeps the
// first claim of an epoch and drops any later one without an error (the claims tables keep the
// tokens of their last inserts, non_replicated_deduplication_window of migration 025; replicated
// tables keep them in Keeper); reading the epoch's rows back tells whose it kept. The same claim
// sent again (after an attempt whose outcome is unknown) finds its own row.
func (t Table) take(ctx context.Context, p int32, c Claim) (bool, error) {
	args := []any{uint16(p), c.Epoch, c.Owner, c.At.UnixMilli()}
	for _, s := range c.Start {
		args = append(args, s)
	}
	// claimed_at from milliseconds: a bound time.Time arrives in whole seconds, too coarse to
	// tell this claimant's row from another's.
	q := fmt.Sprintf(`INSERT INTO %s (partition, epoch, owner, claimed_at, %s) VALUES (?, ?, ?, fromUnixTimestamp64Milli(toInt64(?), 'UTC')%s)`,
		t.Name, strings.Join(t.Starts, ", "), strings.Repeat(", ?", len(t.Starts)))
	token := fmt.Sprintf("%s/%d/%d", t.Name, p, c.Epoch)
	if err := t.Conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_deduplication_token": token})), q, args...); err != nil {
		return false, fmt.Errorf("claim partition %d epoch %d in %s: %w", p, c.Epoch, t.Name, err)
	}
	kept, err := t.claims(ctx, "partition = ? AND epoch = ?", uint16(p), c.Epoch)
	if err != nil {
		return false, fmt.Errorf("read back the claim of partition %d epoch %d in %s: %w", p, c.Epoch, t.Name, err)
	}
	// More than one row means a table that does not deduplicate: every claimant of the epoch
	// starts over, one epoch higher.
	return len(kept) == 1 && kept[0].Owner == c.Owner && kept[0].At.UnixMilli() == c.At.UnixMilli() && slices.Equal(kept[0].Start, c.Start), nil
}

// Open claims partition p for owner one epoch above its claims (Acquire), starting where
// checkpoint says (it reads the checkpoint from the batches outside invalid, those the claims so
// far make invalid), then deletes from batches the rows of the batches the new claim makes
// invalid (zombies', whose records this owner replays), after undo when set (for what must read
// them first). It returns the checkpoint, the claim, and the partition's AnyInvalidSQL with it.
func Open[C any](ctx context.Context, t Table, b Batches, p int32, owner string, now func() time.Time,
	checkpoint func(invalid string) (C, []int64, error), undo func(cp C, invalid string) error) (cp C, c Claim, invalid string, err error) {
	f, c, err := t.Acquire(ctx, p, owner, func(f Fence) (Claim, error) {
		var start []int64
		cp, start, err = checkpoint(f.AnyInvalidSQL())
		return Claim{Epoch: f.MaxEpoch() + 1, Start: start, At: now()}, err
	})
	if err != nil {
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
