// Package viewersketch is the stored form of an item's unique-viewer sketch, shared by the views
// aggregator, which writes them into unique_viewers and unique_viewer_deltas, and the readers
// that union them: an axiomhq HyperLogLog of precision 14, in its own binary encoding. It holds
// no state.
package viewersketch

import (
	"fmt"

	"github.com/axiomhq/hyperloglog"
)

// Decode reads a stored sketch. Anything but a well-formed precision-14 axiomhq sketch is an
// error, never a panic: the bytes come from a table anyone with write access can change, and one
// bad row must not stop a write or a read.
func Decode(blob []byte) (sk *hyperloglog.Sketch, err error) {
	defer func() {
		if r := recover(); r != nil {
			sk, err = nil, fmt.Errorf("decode stored sketch: malformed (%v)", r)
		}
	}()
	// Byte 1 of axiomhq's encoding is the precision; sketches of another one cannot merge.
	if len(blob) >= 2 && blob[1] != 14 {
		return nil, fmt.Errorf("decode stored sketch: precision %d; want 14", blob[1])
	}
	sk = hyperloglog.New14()
	if err := sk.UnmarshalBinary(blob); err != nil {
		return nil, fmt.Errorf("decode stored sketch: %w", err)
	}
	return sk, nil
}
