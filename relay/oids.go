package relay

import (
	"slices"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/decoder"
)

// withTableOIDs returns dcfg with the outbox tables' OIDs that the
// replication connection looked up (by "schema.name") at readAt, so that the
// decoder stops on an outbox table that was renamed or moved instead of
// ignoring its inserts as another table's. dcfg itself is not changed.
func withTableOIDs(dcfg decoder.Config, oids map[string]uint32, readAt pglogrepl.LSN) decoder.Config {
	dcfg.Tables = slices.Clone(dcfg.Tables)
	for i := range dcfg.Tables {
		t := &dcfg.Tables[i]
		schema := t.Schema
		if schema == "" {
			schema = decoder.DefaultSchema
		}
		t.OID = oids[schema+"."+t.Name]
	}
	dcfg.OIDsReadAt = readAt
	return dcfg
}
