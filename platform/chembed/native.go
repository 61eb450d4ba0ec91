package chembed

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
)

// nativeReaderSize must be at least ch-go's own buffer size (128 KiB): then
// chproto.NewReader adopts our bufio.Reader instead of wrapping it, and
// Peek on it tells whether another block follows.
const nativeReaderSize = 256 << 10

// reencodeNative rewrites chDB's Native output, which is always encoded
// for protocol revision 0 (no block info, no per-column serialization
// flag), for a client that announced a later revision with
// client_protocol_version, as ClickHouse's HTTP handler does.
func reencodeNative(src []byte, revision uint64, tz *time.Location) ([]byte, error) {
	if tz == nil {
		tz = time.UTC
	}
	br := bufio.NewReaderSize(bytes.NewReader(src), nativeReaderSize)
	reader := chproto.NewReader(br)
	ctx := column.ServerContext{Timezone: tz}
	out := &chproto.Buffer{Buf: make([]byte, 0, len(src)+len(src)/16+64)}
	for n := 0; ; n++ {
		if _, err := br.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return out.Buf, nil
			}
			return nil, fmt.Errorf("read native block %d: %w", n, err)
		}
		block := proto.Block{ServerContext: &ctx}
		if err := block.Decode(reader, 0); err != nil {
			return nil, fmt.Errorf("decode native block %d: %w", n, err)
		}
		if err := block.Encode(out, revision); err != nil {
			return nil, fmt.Errorf("encode native block %d for revision %d: %w", n, revision, err)
		}
	}
}
