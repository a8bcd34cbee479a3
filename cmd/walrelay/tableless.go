package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/replication"
)

// checkTableless reports whether the tableless outbox (cfg.MessagePrefix set)
// is safe to use: any role that can call pg_logical_emit_message can write
// an event with any topic and key into the stream, so EXECUTE must not be
// granted to PUBLIC. ok is false with a note that says how to fix it; a
// failed check is not ok either.
func checkTableless(ctx context.Context, cfg config.Config) (ok bool, note string) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := replication.Connect(cctx, cfg.PostgresDSN, cfg.PasswordSource())
	if err != nil {
		return false, "could not check who may call pg_logical_emit_message: " + config.Explain(err)
	}
	defer conn.Close(context.Background())
	grants, err := replication.EmitGrants(cctx, replication.NewQuerier(conn))
	if err != nil {
		return false, "could not check who may call pg_logical_emit_message: " + config.Explain(err)
	}
	var public, self []string
	for _, g := range grants {
		if g.Public {
			public = append(public, g.Function)
		}
		if !g.Self {
			self = append(self, g.Function)
		}
	}
	if len(public) > 0 {
		var fix []string
		for _, f := range public {
			fix = append(fix, "REVOKE EXECUTE ON FUNCTION "+f+" FROM PUBLIC;")
		}
		return false, fmt.Sprintf("message prefix %q is on and EXECUTE on %s is granted to PUBLIC: any role that can connect can emit events with any topic and key; fix: %s then GRANT EXECUTE ON FUNCTION ... TO your application role (and to walrelay's role for heartbeats), or let applications call a SECURITY DEFINER walrelay.emit (see docs/outbox-contract.md, Tableless outbox)",
			cfg.MessagePrefix, strings.Join(public, " and "), strings.Join(fix, " "))
	}
	if len(self) > 0 && cfg.HeartbeatInterval > 0 {
		return false, fmt.Sprintf("EXECUTE on %s is revoked from PUBLIC, but walrelay's role may not call it either: heartbeats will fail; fix: GRANT EXECUTE ON FUNCTION %s TO the role walrelay connects as",
			strings.Join(self, " and "), self[0])
	}
	return true, fmt.Sprintf("message prefix %q on; EXECUTE on pg_logical_emit_message is not granted to PUBLIC", cfg.MessagePrefix)
}
