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

	// responseChunkSize matches ClickHouse's max_compress_block_size, so
	// a reader never needs more than this per block.
	responseChunkSize = 1 << 20
)

// blockReader reads the data inside a stream of native compressed blocks.
// ch-go's compress.Reader verifies each block's checksum and decompresses
// it; blockFrames, in front of it, reads the block headers as they pass, so
// that a header claiming more than maxBlock is refused before ch-go
// allocates for it, and so that an input ending between blocks reads as a
// clean io.EOF while one ending inside a block is an error.
type blockReader struct {
	frames *blockFrames
	r      *chcompress.Reader
}

func newBlockReader(src io.Reader, maxBlock int) *blockReader {
	f := &blockFrames{src: src, max: int64(maxBlock)}
	return &blockReader{frames: f, r: chcompress.NewReader(f)}
}

func (b *blockReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == nil {
		return n, nil
	}
	var corrupt *chcompress.CorruptedDataErr
	switch {
	case b.frames.err != nil:
		return n, b.frames.err
	case b.frames.clean:
		return n, io.EOF
	case errors.As(err, &corrupt):
		return n, errors.New("compressed block checksum does not match its data (CHECKSUM_DOESNT_MATCH)")
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return n, fmt.Errorf("read compressed block: %w", io.ErrUnexpectedEOF)
	}
	return n, fmt.Errorf("read compressed block: %w", err)
}

// blockFrames passes a compressed block stream through unchanged while
// following its framing.
type blockFrames struct {
	src    io.Reader
	max    int64
	header [blockFrameSize]byte
	have   int   // header bytes of the current block seen so far
	left   int64 // payload bytes of the current block still to pass
	clean  bool  // the input ended between blocks
	err    error // a header was refused
}

func (f *blockFrames) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if f.have < blockFrameSize {
		n, err := f.src.Read(p[:min(len(p), blockFrameSize-f.have)])
		copy(f.header[f.have:], p[:n])
		f.have += n
		if n == 0 && f.have == 0 && errors.Is(err, io.EOF) {
			f.clean = true
		}
		if f.have == blockFrameSize {
			if f.err = f.checkHeader(); f.err != nil {
				return 0, f.err
			}
		}
		return n, err
	}
	n, err := f.src.Read(p[:min(int64(len(p)), f.left)])
	f.left -= int64(n)
	if f.left == 0 {
		f.have = 0
	}
	return n, err
}

// checkHeader reads the sizes of a complete header and bounds them.
func (f *blockFrames) checkHeader() error {
	compressed := int64(binary.LittleEndian.Uint32(f.header[blockChecksumSize+1:]))
	size := int64(binary.LittleEndian.Uint32(f.header[blockChecksumSize+5:]))
	if compressed < blockHeaderSize || compressed-blockHeaderSize > f.max {
		return fmt.Errorf("compressed block claims %d bytes; limit is %d", compressed, f.max)
	}
	if size > f.max {
		return fmt.Errorf("compressed block claims %d decompressed bytes; limit is %d", size, f.max)
	}
	f.left = compressed - blockHeaderSize
	if f.left == 0 {
		f.have = 0
	}
	return nil
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
