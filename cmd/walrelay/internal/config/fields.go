package config

// The libraries (replication, decoder, sink, checkpoint, relay, operator)
// are used by programs that embed walrelay too, so their errors name their
// own fields, as "package.Type.Field" (replication.Config.DSN,
// relay.Options.MaxInFlight), through
//
//	interface{ Fields() []string }
//
// the main one first. This file is where those names meet the command's:
// fieldKeys maps each field to the settings that set it, and keysOf renders
// an error's fields as setting keys (flags, WALRELAY_ variables and --config
// keys derive from a key). TestLibrariesHoldNoSettingNames keeps the
// command's names out of the libraries; TestFieldKeysAreSettings keeps this
// map's keys real.

// fielder is a library error that names the library's fields it concerns.
type fielder interface {
	Fields() []string
}

// fieldKeys are the settings behind the libraries' fields, the main one
// first.
var fieldKeys = map[string][]string{
	// replication
	"replication.Config.DSN":               {"postgres-dsn"},
	"replication.Config.Slot":              {"slot"},
	"replication.Config.Publication":       {"publication"},
	"replication.Config.Tables":            {"table"},
	"replication.Config.StatusInterval":    {"status-interval"},
	"replication.Config.NoCreateSlot":      {"create-slot"},
	"replication.Config.SlotFailover":      {"slot-failover"},
	"replication.TimeColumnError.Column":   {"created-at-column"},
	"replication.Config.SlotCreateTimeout": {"slot-create-timeout"},
	"replication.Config.PasswordSource":    {"postgres-password-file"},

	// sink
	"sink.Config.Brokers":                  {"kafka-brokers"},
	"sink.Config.Compression":              {"compression"},
	"sink.Config.Topic":                    {"topic"},
	"sink.Config.TableTopics":              {"tables"},
	"sink.Config.DLQTopic":                 {"dlq-topic"},
	"sink.Config.Batching":                 {"batching"},
	"sink.Config.Linger":                   {"linger"},
	"sink.Config.BatchMaxBytes":            {"batch-max-bytes"},
	"sink.Config.MaxBufferedBytes":         {"max-buffered-bytes"},
	"sink.Config.TopicLookupTimeout":       {"kafka-timeout"},
	"sink.Config.TopicPartitions":          {"topic-partitions", "topic-replication-factor"},
	"sink.Config.TLS":                      {"kafka-tls"},
	"sink.Config.TLS.CAFile":               {"kafka-tls-ca-file"},
	"sink.Config.TLS.CertFile":             {"kafka-tls-cert-file"},
	"sink.Config.TLS.KeyFile":              {"kafka-tls-key-file"},
	"sink.Config.TLS.ServerName":           {"kafka-tls-server-name"},
	"sink.Config.TLS.InsecureSkipVerify":   {"kafka-tls-insecure-skip-verify"},
	"sink.Config.SASL.Mechanism":           {"sasl-mechanism"},
	"sink.Config.SASL.Username":            {"sasl-username"},
	"sink.Config.SASL.Password":            {"sasl-password"},
	"sink.Config.SASL.PasswordFile":        {"sasl-password-file"},
	"sink.Config.SASL.OAuthTokenFile":      {"sasl-oauth-token-file"},
	"schema.Config.URLs":                   {"schema-registry-url"},
	"schema.Config.Username":               {"schema-registry-username"},
	"schema.Config.Password":               {"schema-registry-password"},
	"schema.Config.BearerToken":            {"schema-registry-bearer-token"},
	"schema.Config.BearerTokenFile":        {"schema-registry-bearer-token-file"},
	"schema.Config.TLS.CAFile":             {"schema-registry-tls-ca-file"},
	"schema.Config.TLS.CertFile":           {"schema-registry-tls-cert-file"},
	"schema.Config.TLS.KeyFile":            {"schema-registry-tls-key-file"},
	"schema.Config.TLS.ServerName":         {"schema-registry-tls-server-name"},
	"schema.Config.TLS.InsecureSkipVerify": {"schema-registry-tls-insecure-skip-verify"},
	"schema.Config.Timeout":                {"schema-registry-timeout"},
	"schema.Config.Strategy":               {"schema-subject-strategy"},
	"schema.Config.Rules":                  {"schema-rules"},
	"schema.Config.Dir":                    {"schema-dir"},

	// relay
	"relay.Options.Decoder":                    {"table"},
	"relay.Options.MaxInFlight":                {"max-in-flight"},
	"relay.Options.OnPoison":                   {"on-poison"},
	"relay.Options.StandbyRetryInterval":       {"standby-retry-interval"},
	"relay.Options.ShutdownTimeout":            {"shutdown-timeout"},
	"relay.Options.KafkaTimeout":               {"kafka-timeout"},
	"relay.Options.HeartbeatInterval":          {"heartbeat-interval"},
	"relay.Options.HeartbeatDSN":               {"heartbeat-postgres-dsn"},
	"relay.Options.SlotMetricsInterval":        {"slot-metrics-interval"},
	"relay.Options.SlotHolderAlertAfter":       {"slot-holder-alert-after"},
	"relay.Options.AcceptSlotLoss":             {"accept-slot-loss"},
	"relay.Options.SlotMarkTopic":              {"checkpoint-topic"},
	"relay.Options.ExactlyOnce":                {"transactional-id", "checkpoint-topic"},
	"relay.Options.ExactlyOnce.CommitInterval": {"txn-commit-interval"},
	"relay.Options.ExactlyOnce.MaxRecords":     {"txn-max-records"},
	"relay.Options.OutboxSpan":                 {"outbox-span-interval", "outbox-retention-target"},
	"relay.Options.OutboxSpan.TimeColumn":      {"created-at-column"},

	// operator (the field of the tool's options type)
	"operator.DSN":              {"postgres-dsn"},
	"operator.Table":            {"table"},
	"operator.Decoder":          {"table"},
	"operator.MaxInFlight":      {"max-in-flight"},
	"operator.ShutdownTimeout":  {"shutdown-timeout"},
	"operator.KafkaTimeout":     {"kafka-timeout"},
	"operator.ExactlyOnce":      {"transactional-id", "txn-commit-interval", "txn-max-records"},
	"operator.Rate":             {"rate"},
	"operator.Selection":        {"since", "until"},
	"operator.TimeColumn":       {"created-at-column"},
	"operator.Margin":           {"recovery-margin"},
	"operator.RecoveryMargin":   {"recovery-margin"},
	"operator.OlderThan":        {"older-than"},
	"operator.BatchSize":        {"batch-size"},
	"operator.Replication.Slot": {"slot"},
}

// keysOf returns the setting keys e itself names (not those of what it
// wraps): an *Error's, or a library error's fields as keys (a field no
// setting sets is named as it is). nil when e names none.
func keysOf(e error) []string {
	switch k := e.(type) {
	case fielder:
		var keys []string
		for _, f := range k.Fields() {
			if ks, ok := fieldKeys[f]; ok {
				keys = append(keys, ks...)
			} else {
				keys = append(keys, f)
			}
		}
		return keys
	case settingKeyer:
		return k.SettingKeys()
	}
	return nil
}
