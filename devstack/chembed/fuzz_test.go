package chembed

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	chcompress "github.com/ClickHouse/ch-go/compress"
	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/klauspost/compress/zstd"
)

// bodyEncodings are the Content-Encoding values the fuzzer picks from.
var bodyEncodings = []string{"", "gzip", "deflate", "br", "zstd", "lz4", "xz"}

// FuzzRequestBody feeds arbitrary bodies through the whole request-body
// decoding (HTTP Content-Encoding, then native compressed blocks): it must
// fail cleanly, never panic, and never hand on more than the size limit.
func FuzzRequestBody(f *testing.F) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("SELECT 1"))
	_ = zw.Close()
	enc, _ := zstd.NewWriter(nil)
	zs := enc.EncodeAll(chBlocks(f, chcompress.LZ4, []byte("SELECT 2")), nil)
	_ = enc.Close()
	f.Add(uint8(0), false, []byte("SELECT 1"))
	f.Add(uint8(1), false, gz.Bytes())
	f.Add(uint8(4), true, zs)
	f.Add(uint8(0), true, chBlocks(f, chcompress.ZSTD, bytes.Repeat([]byte("x"), 5000)))
	f.Add(uint8(5), false, []byte{0x04, 0x22, 0x4d, 0x18, 0xff})
	f.Add(uint8(1), false, gz.Bytes()[:gz.Len()/2])
	const limit = 64 << 10
	s := &Server{cfg: Config{MaxBodyBytes: limit}}
	f.Fuzz(func(t *testing.T, encoding uint8, decompress bool, raw []byte) {
		r, err := http.NewRequest("POST", "/", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if e := bodyEncodings[int(encoding)%len(bodyEncodings)]; e != "" {
			r.Header.Set("Content-Encoding", e)
		}
		body, closeBody, err := s.requestBody(nil, r, options{decompress: decompress}, limit)
		if err != nil {
			var ce *chError
			if !errors.As(err, &ce) && encoding%uint8(len(bodyEncodings)) == 0 && !decompress {
				t.Fatalf("plain body: got %v; want no error before reading", err)
			}
			return
		}
		defer closeBody()
		got, err := io.ReadAll(io.LimitReader(body, limit+1))
		if len(got) > limit {
			t.Fatalf("read %d bytes; want at most the %d-byte limit", len(got), limit)
		}
		if err == nil && encoding%uint8(len(bodyEncodings)) == 0 && !decompress && !bytes.Equal(got, raw) {
			t.Fatalf("plain body: got %q; want %q", got, raw)
		}
	})
}

// nativeBlock encodes a block the way chDB answers: Native at revision 0.
func nativeBlock(f *testing.F, rows int) []byte {
	f.Helper()
	b := proto.Block{ServerContext: &column.ServerContext{Timezone: time.UTC}}
	for _, c := range []struct{ name, typ string }{{"id", "UInt64"}, {"s", "String"}, {"n", "Nullable(Int32)"}, {"a", "Array(String)"}, {"t", "DateTime"}} {
		if err := b.AddColumn(c.name, column.Type(c.typ)); err != nil {
			f.Fatalf("add column %s: %v", c.name, err)
		}
	}
	for i := 0; i < rows; i++ {
		var n *int32
		if i%2 == 0 {
			v := int32(i)
			n = &v
		}
		if err := b.Append(uint64(i), "row", n, []string{"a", "b"}, time.Unix(int64(i), 0)); err != nil {
			f.Fatalf("append: %v", err)
		}
	}
	var buf chproto.Buffer
	if err := b.Encode(&buf, 0); err != nil {
		f.Fatalf("encode: %v", err)
	}
	return buf.Buf
}

// FuzzReencodeNative feeds arbitrary bytes to the Native re-encoding that
// every clickhouse-go query result goes through: it must fail cleanly or
// produce blocks the client's revision can decode again. Its input is the
// engine's own output, never a client's; a forged Array offset still makes
// clickhouse-go's decoder allocate what the offset claims (found by this
// fuzzer), which only a block header's row count is checked against.
func FuzzReencodeNative(f *testing.F) {
	one := nativeBlock(f, 3)
	f.Add(one)
	f.Add(append(append([]byte{}, one...), nativeBlock(f, 0)...))
	f.Add(one[:len(one)-3])
	f.Add([]byte{})
	f.Add([]byte{0x01, 0x01, 0x01, 'x', 0x06, 'S', 't', 'r', 'i', 'n', 'g', 0x00})
	const revision = 54460
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > 1<<16 {
			return
		}
		out, err := reencodeNative(src, revision, time.UTC)
		if err != nil {
			return
		}
		reader := chproto.NewReader(bytes.NewReader(out))
		for len(out) > 0 {
			block := proto.Block{ServerContext: &column.ServerContext{Timezone: time.UTC}}
			if err := block.Decode(reader, revision); err != nil {
				if errors.Is(err, io.EOF) {
					return
				}
				t.Fatalf("re-encoded %x as %x, which does not decode at revision %d: %v", src, out, revision, err)
			}
		}
	})
}

func TestReencodeNativeRefusesForgedRowCount(t *testing.T) {
	src := binary.AppendUvarint(nil, 1)
	src = binary.AppendUvarint(src, 1<<40)
	src = append(src, "\x01x\x06UInt64"...)
	if _, err := reencodeNative(src, 54460, time.UTC); err == nil || !strings.Contains(err.Error(), "claims 1099511627776 rows") {
		t.Fatalf("block claiming 2^40 rows in %d bytes: got %v; want a 'claims 1099511627776 rows' error", len(src), err)
	}
}
