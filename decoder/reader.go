package decoder

import (
	"bytes"
	"encoding/binary"
	"time"
)

// reader reads big-endian pgoutput fields with bounds checks. The first
// failure sticks: later reads return zero values and err/errOff keep the
// first problem, so callers check once after a group of reads.
type reader struct {
	b      []byte
	off    int
	err    error
	errOff int
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
		r.errOff = r.off
	}
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) u8() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail(ErrTruncated)
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u16() uint16 {
	if r.err != nil || len(r.b)-r.off < 2 {
		r.fail(ErrTruncated)
		return 0
	}
	v := binary.BigEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32() uint32 {
	if r.err != nil || len(r.b)-r.off < 4 {
		r.fail(ErrTruncated)
		return 0
	}
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64() uint64 {
	if r.err != nil || len(r.b)-r.off < 8 {
		r.fail(ErrTruncated)
		return 0
	}
	v := binary.BigEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

// bytes returns the next n bytes, aliasing the input.
func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 {
		r.fail(ErrProtocol)
		return nil
	}
	if len(r.b)-r.off < n {
		r.fail(ErrTruncated)
		return nil
	}
	v := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return v
}

// cstring returns the next NUL-terminated string without the NUL, aliasing
// the input.
func (r *reader) cstring() []byte {
	if r.err != nil {
		return nil
	}
	i := bytes.IndexByte(r.b[r.off:], 0)
	if i < 0 {
		r.off = len(r.b)
		r.fail(ErrTruncated)
		return nil
	}
	v := r.b[r.off : r.off+i : r.off+i]
	r.off += i + 1
	return v
}

// pgTime reads a timestamp in microseconds since 2000-01-01 UTC.
func (r *reader) pgTime() time.Time {
	return pgTime(int64(r.u64()))
}

// end fails with ErrProtocol when bytes are left over.
func (r *reader) end() {
	if r.err == nil && r.off != len(r.b) {
		r.fail(ErrProtocol)
	}
}

// pgEpochUnix is 2000-01-01 00:00:00 UTC in Unix seconds.
const pgEpochUnix = 946684800

// pgTime converts microseconds since 2000-01-01 UTC to a UTC time.Time.
func pgTime(us int64) time.Time {
	return time.Unix(pgEpochUnix+us/1e6, (us%1e6)*1e3).UTC()
}
