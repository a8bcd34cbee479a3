package replication

import (
	"context"
	"fmt"
	"strconv"

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
	return nil
}
