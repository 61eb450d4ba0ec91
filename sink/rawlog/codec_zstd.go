package rawlog

import (
	"github.com/klauspost/compress/zstd"
	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"
)

// pageCodec compresses Parquet pages with one zstd encoder that lives as long as the topic
// table, shared by every file and safe for concurrent use (EncodeAll takes one of the encoder's
// states). parquet-go's own zstd codec keeps its encoders in a sync.Pool of the codec value: a
// codec per file, and every garbage collection emptying the pool, made a fresh encoder (and its
// window buffer, allocated and cleared) for most pages. Decoding is parquet-go's.
type pageCodec struct {
	pqzstd.Codec
	enc *zstd.Encoder
}

// pageWindow bounds the encoder's window: a page is far smaller (parquet-go's default page
// buffer is 256 KiB), so a larger window only costs memory.
const pageWindow = 1 << 20

func newPageCodec() *pageCodec {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithWindowSize(pageWindow),
		zstd.WithZeroFrames(true),
		zstd.WithEncoderCRC(false),
	)
	if err != nil {
		// Only bad options fail, and these are constants.
		panic("rawlog: zstd encoder: " + err.Error())
	}
	return &pageCodec{Codec: pqzstd.Codec{Level: pqzstd.SpeedFastest}, enc: enc}
}

func (c *pageCodec) Encode(dst, src []byte) ([]byte, error) {
	return c.enc.EncodeAll(src, dst[:0]), nil
}
