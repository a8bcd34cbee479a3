// Package cloudauth gets short-lived credentials from the clouds' identity
// services for walrelay's connections: a Postgres password per connection
// (Amazon RDS and Aurora IAM database authentication, Cloud SQL and AlloyDB
// IAM database authentication, Microsoft Entra ID for Azure Database for
// PostgreSQL), and the AWS credential chain for Amazon MSK IAM.
//
// Invariants:
//   - credentials come from each SDK's default chain (environment, shared
//     configuration, workload identity, the instance's metadata service),
//     loaded on first use and refreshed before they expire, so that a
//     long-running walrelay never needs a restart when they rotate;
//   - a token or secret key is never part of an error message, a log line
//     or a String/LogValue of these types;
//   - every type is safe for concurrent use.
package cloudauth
