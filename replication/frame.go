package replication

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// ErrBadFrame reports a CopyData message of the replication stream that is not
// a well-formed walsender message (wrong length, no payload, unknown type): a
// misbehaving server or proxy. The connection is unusable; nothing from it
// past the last confirmed position is trusted. Every *FrameError wraps it.
var ErrBadFrame = errors.New("malformed replication message")

// Walsender message layouts (CopyData payloads), by their first byte:
//
//	'w' XLogData:  type, WAL start (8), server WAL end (8), send time (8), data (>= 1)
//	'k' keepalive: type, server WAL end (8), send time (8), reply requested (1)
const (
	xlogHeaderLen = 1 + 8 + 8 + 8
	keepaliveLen  = 1 + 8 + 8 + 1
)

// FrameError is a CopyData message that could not be parsed. It wraps
// ErrBadFrame.
type FrameError struct {
	// Type is the message's type byte (0 for an empty message).
	Type byte
	// Len is the length of the CopyData payload.
	Len int
	// Offset is where in the payload the message stops making sense (its
	// length when it is too short, 0 for an unknown type).
	Offset int
	// LSN is the WAL start of the message when its header was readable,
	// otherwise the last WAL position received before it.
	LSN pglogrepl.LSN
	// Reason says what is wrong.
	Reason string
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("%s: type %q, %d bytes, at offset %d (lsn %s): %s", ErrBadFrame, e.Type, e.Len, e.Offset, e.LSN, e.Reason)
}

func (e *FrameError) Unwrap() error { return ErrBadFrame }

// frame is one parsed walsender message.
type frame struct {
	keepalive      bool
	walStart       pglogrepl.LSN // XLogData only
	serverWALEnd   pglogrepl.LSN
	replyRequested bool   // keepalive only
	data           []byte // XLogData payload, non-empty; aliases the input
}

// parseFrame parses one CopyData payload of the replication stream. It checks
// every length itself (pglogrepl's parsers trust them) and never panics. last
// is the last WAL position received, for the error.
func parseFrame(b []byte, last pglogrepl.LSN) (frame, error) {
	bad := func(typ byte, off int, lsn pglogrepl.LSN, reason string) (frame, error) {
		return frame{}, &FrameError{Type: typ, Len: len(b), Offset: off, LSN: lsn, Reason: reason}
	}
	if len(b) == 0 {
		return bad(0, 0, last, "empty CopyData")
	}
	switch b[0] {
	case pglogrepl.XLogDataByteID:
		if len(b) < xlogHeaderLen {
			return bad(b[0], len(b), last, fmt.Sprintf("XLogData shorter than its %d-byte header", xlogHeaderLen))
		}
		start := pglogrepl.LSN(binary.BigEndian.Uint64(b[1:]))
		if len(b) == xlogHeaderLen {
			// pgoutput never sends an empty message: every one has a type byte.
			return bad(b[0], len(b), start, "XLogData without a message")
		}
		return frame{
			walStart:     start,
			serverWALEnd: pglogrepl.LSN(binary.BigEndian.Uint64(b[9:])),
			data:         b[xlogHeaderLen:],
		}, nil
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		if len(b) != keepaliveLen {
			return bad(b[0], min(len(b), keepaliveLen), last, fmt.Sprintf("keepalive must be %d bytes", keepaliveLen))
		}
		return frame{
			keepalive:      true,
			serverWALEnd:   pglogrepl.LSN(binary.BigEndian.Uint64(b[1:])),
			replyRequested: b[keepaliveLen-1] != 0,
		}, nil
	default:
		return bad(b[0], 0, last, "unknown message type")
	}
}
