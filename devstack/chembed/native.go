package chembed

import (
	"bufio"
	"bytes"
	"encoding/binary"
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
		if err := checkBlockHeader(br, len(src)); err != nil {
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

// checkBlockHeader refuses a block whose header claims more rows than the
// whole input could hold, before the decoder sizes its columns by that
// claim. Every column type the engine emits takes at least a byte a row,
// except the rare empty Tuple(), which the slack allows for small blocks.
func checkBlockHeader(br *bufio.Reader, total int) error {
	head, _ := br.Peek(2 * binary.MaxVarintLen64)
	columns, n := binary.Uvarint(head)
	if n <= 0 {
		return nil // the decoder reports the short read
	}
	rows, m := binary.Uvarint(head[n:])
	if m <= 0 || columns == 0 {
		return nil
	}
	if rows > uint64(total)+1<<16 {
		return fmt.Errorf("block claims %d rows in %d bytes of input", rows, total)
	}
	return nil
}
