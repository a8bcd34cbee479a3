package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
)

// Identity names the WAL history a replication connection reads: the
// cluster's system identifier and its timeline (IDENTIFY_SYSTEM). WAL
// positions of one history mean nothing in another: a failover to another
// cluster (other system identifier) or a promoted standby (new timeline) may
// not hold what the old server had sent at the same LSN.
type Identity struct {
	SystemID string
	Timeline int32
}

// String returns "<system id>/<timeline>".
func (id Identity) String() string {
	return id.SystemID + "/" + strconv.FormatInt(int64(id.Timeline), 10)
}

// SameHistory reports whether positions confirmed on a server with identity
// id may be reported to a server with identity other: same cluster, same
// timeline.
func (id Identity) SameHistory(other Identity) bool { return id == other }

// identify reads the server's system identifier and timeline.
func (c *Conn) identify(ctx context.Context) error {
	res, err := pglogrepl.IdentifySystem(ctx, c.conn)
	if err != nil {
		return fmt.Errorf("identify system: %w", err)
	}
	if res.SystemID == "" || res.Timeline <= 0 {
		return fmt.Errorf("identify system: unexpected answer (system id %q, timeline %d)", res.SystemID, res.Timeline)
	}
	c.System = Identity{SystemID: res.SystemID, Timeline: res.Timeline}
	c.WALEnd = res.XLogPos
	return nil
}

// SystemIdentifier reads the server's system identifier through q (an
// ordinary connection's; IDENTIFY_SYSTEM needs a replication connection).
func SystemIdentifier(ctx context.Context, q Querier) (string, error) {
	rows, err := q.queryRows(ctx, "SELECT system_identifier::text FROM pg_control_system()")
	if err != nil {
		return "", err
	}
	if len(rows) != 1 || len(rows[0]) != 1 || rows[0][0] == nil {
		return "", errors.New("pg_control_system: unexpected result")
	}
	return string(rows[0][0]), nil
}

// DatabaseName reads the name of the database q is connected to.
func DatabaseName(ctx context.Context, q Querier) (string, error) {
	rows, err := q.queryRows(ctx, "SELECT current_database()::text")
	if err != nil {
		return "", err
	}
	if len(rows) != 1 || len(rows[0]) != 1 || rows[0][0] == nil {
		return "", errors.New("current_database: unexpected result")
	}
	return string(rows[0][0]), nil
}

// TimelineSwitch is one entry of a timeline's history: Timeline ended at
// Switch, where its successor in the history began. WAL below Switch is the
// same in Timeline and in every timeline descended from it at Switch.
type TimelineSwitch struct {
	Timeline int32
	Switch   pglogrepl.LSN
}

// History returns the ancestors of the connection's timeline, oldest first
// (TIMELINE_HISTORY); none on timeline 1. Call it before streaming.
func (c *Conn) History(ctx context.Context) ([]TimelineSwitch, error) {
	if c.System.Timeline <= 1 {
		return nil, nil
	}
	res, err := pglogrepl.TimelineHistory(ctx, c.conn, c.System.Timeline)
	if err != nil {
		return nil, fmt.Errorf("timeline history of timeline %d: %w", c.System.Timeline, err)
	}
	h, err := ParseHistory(res.Content)
	if err != nil {
		return nil, fmt.Errorf("timeline history file %s: %w", res.FileName, err)
	}
	return h, nil
}

// ParseHistory parses a timeline history file: one line per ancestor,
// "<timeline>\t<switch LSN>\t<reason>", blank lines and '#' comments
// ignored. The timelines must rise and so must their switch points.
func ParseHistory(content []byte) ([]TimelineSwitch, error) {
	var h []TimelineSwitch
	for i, line := range strings.Split(string(content), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: %q: want a timeline and a switch position", i+1, line)
		}
		tli, err := strconv.ParseInt(f[0], 10, 32)
		if err != nil || tli <= 0 {
			return nil, fmt.Errorf("line %d: bad timeline %q", i+1, f[0])
		}
		lsn, err := pglogrepl.ParseLSN(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: bad switch position %q", i+1, f[1])
		}
		if n := len(h); n > 0 && (int32(tli) <= h[n-1].Timeline || lsn < h[n-1].Switch) {
			return nil, fmt.Errorf("line %d: timeline %d at %s does not follow timeline %d at %s", i+1, tli, lsn, h[n-1].Timeline, h[n-1].Switch)
		}
		h = append(h, TimelineSwitch{Timeline: int32(tli), Switch: lsn})
	}
	return h, nil
}
