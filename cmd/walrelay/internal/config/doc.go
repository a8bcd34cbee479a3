// Package config holds the settings of every walrelay command and the one
// loader that reads them.
//
// Each command has a configuration type (Config for run and doctor,
// ReplayConfig, RedriveConfig, PruneConfig, CutoverConfig, MigrateConfig,
// StatusConfig, FromDebeziumConfig, NoSettings for version), in a file named
// after the command, that lists its settings: a key, the group -h lists it
// under, a usage line and the field it sets. Entry points: load.go (Load),
// config.go (Config, and Config.Relay: the runtime's relay.Options),
// operator.go (the operator's options of replay, recovery and redrive;
// prune.go and cutover.go map theirs) and explain.go (Explain). Load reads
// them all the same way:
//
//   - a setting key (slot) is the flag --slot, the environment variable
//     WALRELAY_SLOT and the key slot of the YAML file named by --config or
//     WALRELAY_CONFIG (postgres-dsn is postgres_dsn there);
//   - a flag beats the environment, which beats the file, which beats the
//     default;
//   - a secret (postgres-dsn, sasl-password) may come from the file its
//     -file setting names; setting both is refused;
//   - the file may hold the settings of every command: a command ignores the
//     keys of the others' settings and refuses a key no command has;
//   - -h prints built-in defaults only, never a value from the environment or
//     the file (a DSN there may hold a password).
//
// The libraries (replication, sink, relay, operator) name settings by key, never as a
// flag or an environment variable: an error that concerns settings has a
// method SettingKeys() []string, the main key first. Explain renders an
// error with the flag, variable and file key of each setting its chain
// names; the command prints every error through it.
package config
