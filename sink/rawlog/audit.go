package rawlog

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tallypipeline/tally/sink/store"
)

// Coverage is what a topic's files hold for one partition: the offset ranges of its flushes,
// merged where they touch, and its rows by offset.
type Coverage struct {
	Ranges [][2]int64       // sorted, inclusive, merged: one range means no gap
	Rows   map[int64]string // offset -> name of the file holding that row
}

// Audit reads every file of topic in [from, to) and checks the sink's promise: no two flushes of
// a partition overlap, and no row is in two files or outside its file's range. It returns each
// partition's coverage; a broken promise is an error naming the files.
func Audit(ctx context.Context, st store.Store, topic string, from, to time.Time) (map[int32]*Coverage, error) {
	refs, err := List(ctx, st, topic, from, to)
	if err != nil {
		return nil, err
	}
	out := map[int32]*Coverage{}
	flushes := map[int32][][2]int64{}
	for _, ref := range refs {
		c := out[ref.Partition]
		if c == nil {
			c = &Coverage{Rows: map[int64]string{}}
			out[ref.Partition] = c
		}
		r := [2]int64{ref.First, ref.Last}
		if fs := flushes[ref.Partition]; len(fs) == 0 || fs[len(fs)-1] != r {
			flushes[ref.Partition] = append(fs, r)
		}
		err := readAny(ctx, st, topic, ref.Name, func(p int32, off int64) error {
			if p != ref.Partition || off < ref.First || off > ref.Last {
				return fmt.Errorf("%s holds partition %d offset %d, outside its name", ref.Name, p, off)
			}
			if other, dup := c.Rows[off]; dup {
				return fmt.Errorf("partition %d offset %d is in %s and in %s", p, off, other, ref.Name)
			}
			c.Rows[off] = ref.Name
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for p, fs := range flushes {
		slices.SortFunc(fs, func(a, b [2]int64) int { return cmpInt(a[0], b[0]) })
		c := out[p]
		for _, r := range fs {
			if n := len(c.Ranges); n > 0 && r[0] <= c.Ranges[n-1][1] {
				return nil, fmt.Errorf("partition %d: flush %d-%d overlaps flush ending at %d", p, r[0], r[1], c.Ranges[n-1][1])
			}
			if n := len(c.Ranges); n > 0 && r[0] == c.Ranges[n-1][1]+1 {
				c.Ranges[n-1][1] = r[1]
			} else {
				c.Ranges = append(c.Ranges, r)
			}
		}
	}
	return out, nil
}

// readAny reads the positions of a file's rows, whatever its topic's row type.
func readAny(ctx context.Context, st store.Store, _ string, name string, fn func(int32, int64) error) error {
	pos := func(rows []posRow) error {
		for _, r := range rows {
			if err := fn(r.Partition, r.Offset); err != nil {
				return err
			}
		}
		return nil
	}
	return ReadFile(ctx, st, name, pos)
}

// posRow reads only the columns every topic has.
type posRow struct {
	Partition int32 `parquet:"partition"`
	Offset    int64 `parquet:"offset"`
}

func (r posRow) Pos() (int32, int64) { return r.Partition, r.Offset }
func (r posRow) EventTS() int64      { return 0 }
