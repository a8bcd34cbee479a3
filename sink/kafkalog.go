package sink

import (
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// kafkaLogger passes franz-go's own log lines at warn and above (a broker
// that cannot be dialed, a connection cut, a TLS or SASL hint) to the sink's
// logger, tagged component=kafka-client. Its info and debug lines (every
// metadata refresh, every request) are left out whatever the handler's
// level.
func kafkaLogger(l *slog.Logger) kgo.Logger {
	return warnAndAbove{kslog.New(l.With("component", "kafka-client"))}
}

type warnAndAbove struct{ *kslog.Logger }

// Level is the handler's level, at most warn.
func (w warnAndAbove) Level() kgo.LogLevel { return min(w.Logger.Level(), kgo.LogLevelWarn) }
