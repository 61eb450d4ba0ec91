package chembed

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	chcompress "github.com/ClickHouse/ch-go/compress"
)

func chBlocks(t testing.TB, m chcompress.Method, parts ...[]byte) []byte {
	t.Helper()
	w := chcompress.NewWriter(chcompress.LevelZero, m)
	var out []byte
	for _, p := range parts {
		if err := w.Compress(p); err != nil {
			t.Fatalf("compress: %v", err)
		}
		out = append(out, w.Data...)
	}
	return out
}

func TestBlockReader(t *testing.T) {
	big := bytes.Repeat([]byte("clickhouse native block "), 100_000)
	good := chBlocks(t, chcompress.LZ4, []byte("hello "), []byte("world"))
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-1] ^= 0xff
	tests := []struct {
		name    string
		in      []byte
		max     int
		want    []byte
		wantErr string
	}{
		{name: "lz4 two blocks", in: good, max: 1 << 20, want: []byte("hello world")},
		{name: "zstd", in: chBlocks(t, chcompress.ZSTD, big), max: 1 << 22, want: big},
		{name: "none", in: chBlocks(t, chcompress.None, []byte("as is")), max: 1 << 20, want: []byte("as is")},
		{name: "empty stream", in: nil, max: 1 << 20, want: []byte{}},
		{name: "checksum", in: corrupt, max: 1 << 20, wantErr: "checksum"},
		{name: "truncated", in: good[:len(good)-3], max: 1 << 20, wantErr: "unexpected EOF"},
		{name: "block over limit", in: chBlocks(t, chcompress.LZ4, big), max: 1 << 20, wantErr: "limit"},
		{name: "garbage", in: []byte(strings.Repeat("x", 40)), max: 1 << 20, wantErr: "limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newBlockReader(bytes.NewReader(tc.in), tc.max)
			got, err := io.ReadAll(r)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("read: got %v; want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("read: got %v; want nil", err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("read: got %d bytes; want %d", len(got), len(tc.want))
			}
		})
	}
}

func TestCompressBlocksRoundTrip(t *testing.T) {
	data := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, 500_000) // spans several 1 MiB blocks
	for _, m := range []blockMethod{blockLZ4, blockZSTD, blockNone} {
		framed, err := compressBlocks(data, m)
		if err != nil {
			t.Fatalf("compressBlocks(%d): %v", m, err)
		}
		got, err := io.ReadAll(newBlockReader(bytes.NewReader(framed), responseChunkSize))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round trip method %d: got %d bytes, %v; want %d bytes", m, len(got), err, len(data))
		}
	}
}

func TestNegotiateEncoding(t *testing.T) {
	tests := []struct{ accept, want string }{
		{"", ""},
		{"gzip", "gzip"},
		{"br;q=0, zstd", "zstd"},
		{"identity, deflate;q=0.5", "deflate"},
		{"x-unknown, lz4", "lz4"},
		{"gzip;q=0", ""},
	}
	for _, tc := range tests {
		t.Run(tc.accept, func(t *testing.T) {
			if got := negotiateEncoding(tc.accept); got != tc.want {
				t.Fatalf("negotiateEncoding(%q): got %q; want %q", tc.accept, got, tc.want)
			}
		})
	}
}

func TestHTTPEncodingsRoundTrip(t *testing.T) {
	data := bytes.Repeat([]byte("tally "), 10_000)
	for _, enc := range strings.Fields(responseEncodings) {
		t.Run(enc, func(t *testing.T) {
			var buf bytes.Buffer
			if err := encodeBody(&buf, enc, data); err != nil {
				t.Fatalf("encode: %v", err)
			}
			r, closeDecoder, err := decodeBody(&buf, enc)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			defer closeDecoder()
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("round trip: got %d bytes, %v; want %d bytes", len(got), err, len(data))
			}
		})
	}
}

func TestLimitedBody(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		limit   int64
		wantErr bool
	}{
		{"under", "abc", 4, false},
		{"exact", "abcd", 4, false},
		{"over", "abcde", 4, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := io.ReadAll(&limitedBody{r: strings.NewReader(tc.in), left: tc.limit, limit: tc.limit})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("read: got %q, nil; want a limit error", got)
				}
				return
			}
			if err != nil || string(got) != tc.in {
				t.Fatalf("read: got %q, %v; want %q, nil", got, err, tc.in)
			}
		})
	}
}

// FuzzBlockReader feeds arbitrary bytes to the compressed-block reader: it
// must fail cleanly, never panic or allocate past its limit, and it must
// read back what the ClickHouse writer framed.
func FuzzBlockReader(f *testing.F) {
	f.Add([]byte{}, []byte("payload"))
	f.Add(chBlocks(f, chcompress.LZ4, []byte("abc")), []byte("x"))
	f.Add(chBlocks(f, chcompress.ZSTD, []byte("abc")), []byte(""))
	f.Add(bytes.Repeat([]byte{0x82}, 64), bytes.Repeat([]byte("ab"), 300))
	f.Fuzz(func(t *testing.T, raw, payload []byte) {
		r := newBlockReader(bytes.NewReader(raw), 1<<16)
		_, err := io.Copy(io.Discard, r)
		if err != nil && errors.Is(err, io.EOF) {
			t.Fatalf("garbage %x: got a bare EOF error %v; want nil or a descriptive error", raw, err)
		}
		framed, err := compressBlocks(payload, blockLZ4)
		if err != nil {
			t.Fatalf("compressBlocks: %v", err)
		}
		got, err := io.ReadAll(newBlockReader(bytes.NewReader(framed), 1<<21))
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("round trip: got %x, %v; want %x, nil", got, err, payload)
		}
	})
}
