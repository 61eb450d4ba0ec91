package rawlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/tallypipeline/tally/sink/store"
)

// Marker is the record of a partition's flush being written (package archive): the sink writes
// it before the flush's files and leaves it in place, so it always names the partition's latest
// flush. A flush starts only after the previous one is committed, hence every file of the
// partition whose range starts below the marker's First belongs to a complete flush.
type Marker struct {
	First int64 `json:"first"`
	Last  int64 `json:"last"`
}

// WriteMarker makes m the marker of topic's partition, durably.
func WriteMarker(st store.Store, topic string, partition int32, m Marker) error {
	b, _ := json.Marshal(m)
	name := MarkerName(topic, partition)
	f, err := st.Create(name[:strings.LastIndexByte(name, '/')+1])
	if err == nil {
		if _, err = f.Write(b); err == nil {
			err = f.Commit(name)
		} else {
			f.Abort()
		}
	}
	if err != nil {
		return fmt.Errorf("write flush marker of %s partition %d: %w", topic, partition, err)
	}
	return nil
}

// ReadMarker returns the marker of topic's partition, nil when there is none.
func ReadMarker(ctx context.Context, st store.Store, topic string, partition int32) (*Marker, error) {
	name := MarkerName(topic, partition)
	b, err := st.ReadAll(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read flush marker of %s partition %d: %w", topic, partition, err)
	}
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil || m.First > m.Last || m.First < 0 {
		return nil, fmt.Errorf("flush marker %s holds %q; want {\"first\":N,\"last\":M}", name, b)
	}
	return &m, nil
}

// Complete returns, per partition of topic that has a marker, the offset below which every
// flush was complete when it was called: the marker's First, or its Last+1 when the sink's
// consumer group has committed past the marker's flush (committed, if not nil, returns the
// group's committed offsets of topic; it is called after the markers are read, so a commit it
// sees is of the marker's flush or a later one). Call it before listing files: the files listed
// afterwards whose range starts below the result are whole flushes, and the records from it on
// are to be read from Kafka (a file at or above it may be part of a flush still being written).
// A partition without a marker has no complete flush.
func Complete(ctx context.Context, st store.Store, topic string, committed func() (map[int32]int64, error)) (map[int32]int64, error) {
	prefix := MarkerName(topic, 0)
	prefix = prefix[:strings.LastIndexByte(prefix, '/')+1]
	names, err := st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list flush markers of %s: %w", topic, err)
	}
	markers := map[int32]*Marker{}
	for _, n := range names {
		base, ok := strings.CutSuffix(strings.TrimPrefix(n, prefix), ".json")
		p, err := strconv.ParseUint(strings.TrimPrefix(base, "p"), 10, 16)
		if !ok || !strings.HasPrefix(base, "p") || err != nil || MarkerName(topic, int32(p)) != n {
			continue // not a marker
		}
		m, err := ReadMarker(ctx, st, topic, int32(p))
		if err != nil {
			return nil, err
		}
		if m != nil {
			markers[int32(p)] = m
		}
	}
	var done map[int32]int64
	if committed != nil && len(markers) > 0 {
		if done, err = committed(); err != nil {
			return nil, fmt.Errorf("read the sink's committed offsets of %s: %w", topic, err)
		}
	}
	out := map[int32]int64{}
	for p, m := range markers {
		out[p] = m.First
		if c, ok := done[p]; ok && c > m.Last {
			out[p] = m.Last + 1
		}
	}
	return out, nil
}
