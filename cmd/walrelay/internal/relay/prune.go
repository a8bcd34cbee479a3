package relay

import (
	"context"
	"fmt"
	"io"
)

// pruneCommand implements `walrelay prune`. (Placeholder until the retention
// job lands: it refuses to run rather than pretend.)
func pruneCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	_ = ctx
	_ = args
	_ = getenv
	_ = stdout
	fmt.Fprintln(stderr, "walrelay prune: not implemented yet")
	return ExitFailure
}
