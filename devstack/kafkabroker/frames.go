package kafkabroker

import "encoding/binary"

// frames follows the frames of one direction of a Kafka connection, passed to it in pieces of
// any size as they are read or written: each frame is a 4-byte size, then that many bytes. It
// shows each frame's head (its first headLen bytes, the size included) and, when asked, the
// whole frame. One goroutine uses a frames at a time.
type frames struct {
	headLen int
	buf     []byte // the current frame so far: its head, then the rest when gathered
	skip    int    // bytes of the current frame still to come
	gather  bool
}

// follow reads p. For each frame whose head is whole it calls onHead, which says whether to
// gather the frame and whether to go on; a gathered frame goes to onFrame once whole.
func (f *frames) follow(p []byte, onHead func(head []byte) (gather, more bool), onFrame func(frame []byte)) {
	for len(p) > 0 {
		if f.skip > 0 {
			k := min(f.skip, len(p))
			if f.gather {
				f.buf = append(f.buf, p[:k]...)
			}
			f.skip -= k
			p = p[k:]
			if f.skip == 0 {
				f.end(onFrame)
			}
			continue
		}
		k := min(f.headLen-len(f.buf), len(p))
		f.buf = append(f.buf, p[:k]...)
		p = p[k:]
		if len(f.buf) < f.headLen {
			return
		}
		f.skip = max(int(binary.BigEndian.Uint32(f.buf))+4-f.headLen, 0)
		gather, more := onHead(f.buf)
		f.gather = gather
		if !gather || f.skip == 0 {
			f.end(onFrame)
		}
		if !more {
			return
		}
	}
}

// end closes the current frame's bytes, handing them to onFrame when gathered.
func (f *frames) end(onFrame func(frame []byte)) {
	if f.gather {
		onFrame(f.buf)
	}
	f.buf, f.gather = f.buf[:0], false
}
