package chembed

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	chcompress "github.com/ClickHouse/ch-go/compress"
	"github.com/andybalholm/brotli"
	"github.com/go-faster/city"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// blockMethod is the codec of ClickHouse's native compressed blocks
// (compress=1 / decompress=1), chosen by network_compression_method.
type blockMethod uint8

const (
	blockLZ4 blockMethod = iota // the ClickHouse default
	blockZSTD
	blockNone
)

func parseBlockMethod(s string) (blockMethod, bool) {
	switch strings.ToUpper(s) {
	case "LZ4", "LZ4HC":
		return blockLZ4, true
	case "ZSTD":
		return blockZSTD, true
	case "NONE":
		return blockNone, true
	}
	return 0, false
}

// Native compressed block layout: a 16-byte CityHash128 of the rest, then
// a method byte, the compressed size (including these 9 header bytes) and
// the decompressed size, both little-endian uint32, then the payload.
const (
	blockChecksumSize = 16
	blockHeaderSize   = 9
	blockFrameSize    = blockChecksumSize + blockHeaderSize

	blockMethodNone = 0x02
	blockMethodLZ4  = 0x82
	blockMethodZSTD = 0x90

	// responseChunkSize matches ClickHouse's max_compress_block_size, so
	// a reader never needs more than this per block.
	responseChunkSize = 1 << 20
)

// blockReader reads the data inside a stream of native compressed blocks,
// verifying each checksum. maxBlock bounds what a block header may claim,
// so a forged header cannot make it allocate without limit.
type blockReader struct {
	src      io.Reader
	maxBlock int
	frame    [blockFrameSize]byte
	raw      []byte
	data     []byte
	pos      int
	zstd     *zstd.Decoder
}

func newBlockReader(src io.Reader, maxBlock int) *blockReader {
	return &blockReader{src: src, maxBlock: maxBlock}
}

func (b *blockReader) Read(p []byte) (int, error) {
	for b.pos >= len(b.data) {
		if err := b.nextBlock(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.data[b.pos:])
	b.pos += n
	return n, nil
}

// Close releases the zstd decoder, if one was needed.
func (b *blockReader) Close() {
	if b.zstd != nil {
		b.zstd.Close()
		b.zstd = nil
	}
}

// nextBlock reads and decodes one block; io.EOF means the stream ended
// cleanly between blocks.
func (b *blockReader) nextBlock() error {
	if _, err := io.ReadFull(b.src, b.frame[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		return fmt.Errorf("read compressed block header: %w", err)
	}
	method := b.frame[blockChecksumSize]
	compressed := int64(binary.LittleEndian.Uint32(b.frame[blockChecksumSize+1:]))
	size := int64(binary.LittleEndian.Uint32(b.frame[blockChecksumSize+5:]))
	if compressed < blockHeaderSize || compressed-blockHeaderSize > int64(b.maxBlock) {
		return fmt.Errorf("compressed block claims %d bytes; limit is %d", compressed, b.maxBlock)
	}
	if size > int64(b.maxBlock) {
		return fmt.Errorf("compressed block claims %d decompressed bytes; limit is %d", size, b.maxBlock)
	}
	b.raw = append(b.raw[:0], b.frame[blockChecksumSize:]...)
	b.raw = append(b.raw, make([]byte, compressed-blockHeaderSize)...)
	if _, err := io.ReadFull(b.src, b.raw[blockHeaderSize:]); err != nil {
		return fmt.Errorf("read compressed block payload: %w", noEOF(err))
	}
	sum := city.CH128(b.raw)
	if sum.Low != binary.LittleEndian.Uint64(b.frame[0:8]) || sum.High != binary.LittleEndian.Uint64(b.frame[8:16]) {
		return fmt.Errorf("compressed block checksum does not match its data (CHECKSUM_DOESNT_MATCH)")
	}
	payload := b.raw[blockHeaderSize:]
	if cap(b.data) < int(size) {
		b.data = make([]byte, size)
	}
	b.data, b.pos = b.data[:size], 0
	switch method {
	case blockMethodNone:
		if len(payload) != int(size) {
			return fmt.Errorf("uncompressed block holds %d bytes; header says %d", len(payload), size)
		}
		copy(b.data, payload)
	case blockMethodLZ4:
		n, err := lz4.UncompressBlock(payload, b.data)
		if err != nil {
			return fmt.Errorf("decompress LZ4 block: %w", err)
		}
		if n != int(size) {
			return fmt.Errorf("LZ4 block holds %d bytes; header says %d", n, size)
		}
	case blockMethodZSTD:
		if b.zstd == nil {
			d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(b.maxBlock)))
			if err != nil {
				return fmt.Errorf("create zstd decoder: %w", err)
			}
			b.zstd = d
		}
		out, err := b.zstd.DecodeAll(payload, b.data[:0])
		if err != nil {
			return fmt.Errorf("decompress ZSTD block: %w", err)
		}
		if len(out) != int(size) {
			return fmt.Errorf("ZSTD block holds %d bytes; header says %d", len(out), size)
		}
		b.data = out
	default:
		return fmt.Errorf("compressed block method 0x%02x is not supported", method)
	}
	return nil
}

// noEOF reports a stream that ends inside a block as truncated, not as a
// clean end.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// compressBlocks frames src as native compressed blocks of at most
// responseChunkSize bytes each. Blocks are independent, so large results
// are compressed on all cores: compression costs more than the engine
// spends producing a typical 100k-row result.
func compressBlocks(src []byte, method blockMethod) ([]byte, error) {
	m := chcompress.LZ4
	switch method {
	case blockZSTD:
		m = chcompress.ZSTD
	case blockNone:
		m = chcompress.None
	}
	chunks := (len(src) + responseChunkSize - 1) / responseChunkSize
	parts := make([][]byte, chunks)
	errs := make([]error, chunks)
	var next atomic.Int64
	work := func() {
		w := chcompress.NewWriter(chcompress.LevelZero, m)
		for i := int(next.Add(1) - 1); i < chunks; i = int(next.Add(1) - 1) {
			chunk := src[i*responseChunkSize : min(len(src), (i+1)*responseChunkSize)]
			if err := w.Compress(chunk); err != nil {
				errs[i] = fmt.Errorf("compress response block %d: %w", i, err)
				continue
			}
			parts[i] = bytes.Clone(w.Data)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), chunks)
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return bytes.Join(parts, nil), nil
}

// HTTP Content-Encoding for request bodies and, with
// enable_http_compression=1, for responses.

// decodeBody undoes a request's Content-Encoding. The returned close
// function releases decoder resources.
func decodeBody(r io.Reader, encoding string) (io.Reader, func(), error) {
	noop := func() {}
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
		return r, noop, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, noop, fmt.Errorf("read gzip header: %w", err)
		}
		return zr, func() { _ = zr.Close() }, nil
	case "deflate":
		zr, err := zlib.NewReader(r)
		if err != nil {
			return nil, noop, fmt.Errorf("read zlib header: %w", err)
		}
		return zr, func() { _ = zr.Close() }, nil
	case "br":
		return brotli.NewReader(r), noop, nil
	case "zstd":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, noop, fmt.Errorf("create zstd decoder: %w", err)
		}
		return zr, zr.Close, nil
	case "lz4":
		return lz4.NewReader(r), noop, nil
	}
	return nil, noop, newError(http.StatusNotImplemented, codeNotImplemented, "Content-Encoding %q is not supported", encoding)
}

// responseEncodings lists what the server can encode, in its preference
// order when a client accepts several equally.
const responseEncodings = "gzip deflate br zstd lz4"

// negotiateEncoding picks the first encoding in Accept-Encoding that the
// server supports and that the client did not refuse with q=0.
func negotiateEncoding(accept string) string {
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" || !strings.Contains(" "+responseEncodings+" ", " "+name+" ") {
			continue
		}
		if q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok && strings.Trim(q, "0.") == "" {
			continue
		}
		return name
	}
	return ""
}

// encodeBody compresses a whole response body with an HTTP encoding.
func encodeBody(w io.Writer, encoding string, body []byte) error {
	var zw io.WriteCloser
	switch encoding {
	case "gzip":
		// Level 3 is ClickHouse's http_zlib_compression_level default.
		zw, _ = gzip.NewWriterLevel(w, 3)
	case "deflate":
		zw, _ = zlib.NewWriterLevel(w, 3)
	case "br":
		zw = brotli.NewWriterLevel(w, brotli.DefaultCompression)
	case "zstd":
		enc, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
		if err != nil {
			return fmt.Errorf("create zstd encoder: %w", err)
		}
		zw = enc
	case "lz4":
		zw = lz4.NewWriter(w)
	default:
		return fmt.Errorf("encode response: unsupported encoding %q", encoding)
	}
	if _, err := zw.Write(body); err != nil {
		_ = zw.Close()
		return fmt.Errorf("write %s response: %w", encoding, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("finish %s response: %w", encoding, err)
	}
	return nil
}
