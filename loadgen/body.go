package loadgen

import (
	"bytes"
	"math/rand/v2"
)

// Widths of the digit fields patched into a pre-built NDJSON body: every line has the same
// length, so refreshing a batch is overwriting digits at known offsets, not formatting JSON.
const (
	itemDigits   = 8
	viewerDigits = 10
)

// itemID names item i of a run: i = 0 is the hot item. Fixed width, so body offsets hold.
func itemID(prefix string, i int) string {
	b := make([]byte, 0, len(prefix)+2+itemDigits)
	b = append(b, prefix...)
	b = append(b, "-i"...)
	return string(appendDigits(b, uint64(i), itemDigits))
}

// appendDigits appends v in decimal, zero-padded to width (v must fit).
func appendDigits(b []byte, v uint64, width int) []byte {
	n := len(b)
	b = append(b, make([]byte, width)...)
	putDigits(b[n:], v)
	return b
}

// putDigits writes v in decimal into dst, zero-padded to len(dst); higher digits that do not
// fit are dropped, which the callers prevent by bounding v.
func putDigits(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = byte('0' + v%10)
		v /= 10
	}
}

// viewBatch is one poster's reusable NDJSON body of n view lines.
type viewBatch struct {
	buf       []byte
	lineLen   int
	itemOff   int // offset of the item digits within a line
	viewerOff int // offset of the viewer digits within a line
	n         int
}

func newViewBatch(prefix string, n int) *viewBatch {
	var line bytes.Buffer
	line.WriteString(`{"type":"view","item_id":"`)
	line.WriteString(prefix)
	line.WriteString("-i")
	itemOff := line.Len()
	line.Write(bytes.Repeat([]byte{'0'}, itemDigits))
	line.WriteString(`","viewer_id":"v`)
	viewerOff := line.Len()
	line.Write(bytes.Repeat([]byte{'0'}, viewerDigits))
	line.WriteString("\"}\n")
	return &viewBatch{
		buf: bytes.Repeat(line.Bytes(), n), lineLen: line.Len(),
		itemOff: itemOff, viewerOff: viewerOff, n: n,
	}
}

// fill draws every line afresh: the hot item (item 0) with probability hot, else one of items
// others uniformly, and a viewer uniformly from viewers.
func (b *viewBatch) fill(rng *rand.Rand, hot float64, items, viewers int) {
	for i := range b.n {
		line := b.buf[i*b.lineLen : (i+1)*b.lineLen]
		item := 0
		if rng.Float64() >= hot {
			item = 1 + rng.IntN(items)
		}
		putDigits(line[b.itemOff:b.itemOff+itemDigits], uint64(item))
		putDigits(line[b.viewerOff:b.viewerOff+viewerDigits], uint64(rng.IntN(viewers)))
	}
}
