package kafka

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The lz4 compressor writes frames of 64 KiB blocks, also when its pooled writers are reused,
// and the frames decompress to the batch.
func TestLz4FramesHave64KiBBlocks(t *testing.T) {
	c := newLz4Frames()
	for i, size := range []int{100, 300_000, 1_000_000, 100} {
		src := []byte(strings.Repeat("view of item-42 by viewer-7;", size/28+1)[:size])
		var dst bytes.Buffer
		out, codec := c.Compress(&dst, src)
		if codec != kgo.CodecLz4 {
			t.Fatalf("batch %d: got codec %d; want lz4", i, codec)
		}
		// The frame descriptor's BD byte (after the 4-byte magic and the FLG byte) holds the
		// block maximum size index in bits 4-6: 4 is 64 KiB, 7 is 4 MiB.
		if len(out) < 6 {
			t.Fatalf("batch %d: got a frame of %d bytes", i, len(out))
		}
		if got := out[5] >> 4 & 7; got != 4 {
			t.Errorf("batch %d: got block size index %d; want 4 (64 KiB)", i, got)
		}
		back, err := io.ReadAll(lz4.NewReader(bytes.NewReader(out)))
		if err != nil || !bytes.Equal(back, src) {
			t.Fatalf("batch %d: decompressed %d bytes (err %v); want the %d sent", i, len(back), err, size)
		}
	}
}
