package loadgen

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"time"
)

// Widths of a view count line's patched fields: a Unix second (10 digits until 2286), a source
// number, and a seq drawn from [10¹⁸, 10¹⁹), so it has 19 digits and no leading zero.
const (
	secondDigits = 10
	sourceDigits = 3
	seqDigits    = 19
	loadSources  = 100
)

// viewCountBatch is one poster's reusable NDJSON body of n edge view count lines, each carrying
// the same count of views.
type viewCountBatch struct {
	buf                             []byte
	lineLen                         int
	itemOff, secOff, srcOff, seqOff int
	n                               int
}

func newViewCountBatch(prefix string, n, views int) lineBatch {
	var line bytes.Buffer
	line.WriteString(`{"type":"view_count","item_id":"`)
	line.WriteString(prefix)
	line.WriteString("-i")
	itemOff := line.Len()
	line.Write(bytes.Repeat([]byte{'0'}, itemDigits))
	line.WriteString(`","second":`)
	secOff := line.Len()
	line.Write(bytes.Repeat([]byte{'1'}, secondDigits))
	line.WriteString(`,"count":` + strconv.Itoa(views) + `,"source_id":"`)
	line.WriteString(prefix)
	line.WriteString("-edge")
	srcOff := line.Len()
	line.Write(bytes.Repeat([]byte{'0'}, sourceDigits))
	line.WriteString(`","seq":`)
	seqOff := line.Len()
	line.Write(bytes.Repeat([]byte{'1'}, seqDigits))
	line.WriteString("}\n")
	return &viewCountBatch{buf: bytes.Repeat(line.Bytes(), n), lineLen: line.Len(),
		itemOff: itemOff, secOff: secOff, srcOff: srcOff, seqOff: seqOff, n: n}
}

// fill draws every line afresh: the hot item (item 0) with probability hot, else one of items
// others uniformly; the current second; one of loadSources sources and a random seq (distinct
// with overwhelming probability, so nothing is deduplicated).
func (b *viewCountBatch) fill(rng *rand.Rand, hot float64, items, _ int) {
	sec := uint64(time.Now().Unix())
	for i := range b.n {
		line := b.buf[i*b.lineLen : (i+1)*b.lineLen]
		item := 0
		if rng.Float64() >= hot {
			item = 1 + rng.IntN(items)
		}
		putDigits(line[b.itemOff:b.itemOff+itemDigits], uint64(item))
		putDigits(line[b.secOff:b.secOff+secondDigits], sec)
		putDigits(line[b.srcOff:b.srcOff+sourceDigits], uint64(rng.IntN(loadSources)))
		putDigits(line[b.seqOff:b.seqOff+seqDigits], 1e18+rng.Uint64N(9e18))
	}
}

func (b *viewCountBatch) body() []byte { return b.buf }

// viewCountsStream posts edge view counts to the views path: the same topic, group and probes
// as views.
func viewCountsStream(c Config) eventStream {
	return eventStream{name: "view-counts", rate: c.CountRate, batch: c.CountBatch, conc: c.Concurrency, hot: c.HotShare, items: c.Items, ids: c.Viewers,
		newBatch: func(prefix string, n int) lineBatch { return newViewCountBatch(prefix, n, c.CountViews) },
		topic:    viewsTopic, group: c.Group, metrics: "tally_views_", probe: viewProbe, send: postEvents(c.CountBatch)}
}
