package kafka

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ParseCompression is the producer option kafka.compression names: none, lz4, zstd, snappy or
// gzip ("" is none). Consumers need nothing: Kafka clients decompress what they fetch.
func ParseCompression(name string) (kgo.ProducerOpt, error) {
	switch name {
	case "", "none":
		return kgo.ProducerBatchCompression(kgo.NoCompression()), nil
	case "lz4":
		return kgo.WithCompressor(newLz4Frames()), nil
	case "zstd":
		return kgo.ProducerBatchCompression(kgo.ZstdCompression()), nil
	case "snappy":
		return kgo.ProducerBatchCompression(kgo.SnappyCompression()), nil
	case "gzip":
		return kgo.ProducerBatchCompression(kgo.GzipCompression()), nil
	}
	return nil, fmt.Errorf("compression %q; want none, lz4, zstd, snappy or gzip", name)
}

// lz4Frames compresses each batch into one lz4 frame of 64 KiB blocks, the block size of
// Kafka's own clients. franz-go's lz4 codec keeps the library's default of 4 MiB blocks, and a
// reader of such a frame takes a buffer of the block size to decompress into, however small
// the batch: a consumer whose pooled buffers are dropped (by the garbage collector, or at random
// under the race detector) allocates and faults in 4 MiB per batch it fetches.
type lz4Frames struct{ writers sync.Pool }

func newLz4Frames() *lz4Frames {
	return &lz4Frames{writers: sync.Pool{New: func() any {
		w := lz4.NewWriter(nil)
		// Only an invalid option fails, and this one is valid.
		_ = w.Apply(lz4.BlockSizeOption(lz4.Block64Kb))
		return w
	}}}
}

// Compress writes src to dst as one frame; the producer sends it only if it is the shorter.
func (c *lz4Frames) Compress(dst *bytes.Buffer, src []byte, _ ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	w := c.writers.Get().(*lz4.Writer)
	defer c.writers.Put(w)
	w.Reset(dst) // keeps the block size
	if _, err := w.Write(src); err != nil {
		return nil, kgo.CodecError
	}
	if err := w.Close(); err != nil {
		return nil, kgo.CodecError
	}
	return dst.Bytes(), kgo.CodecLz4
}
