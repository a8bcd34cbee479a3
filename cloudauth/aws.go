package cloudauth

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
)

// RefreshBefore is how long before they expire cached AWS credentials are
// replaced: long enough for a connection and its authentication to finish
// with the old ones.
const RefreshBefore = 5 * time.Minute

// AWSCredentials returns the AWS default credential chain (environment
// variables, the shared config and credentials files with their profile,
// web identity as IRSA sets it up, EKS Pod Identity and ECS container
// credentials, and the EC2 instance metadata service), cached and refreshed
// RefreshBefore they expire. region is "" for the chain's own (AWS_REGION,
// the profile's). The chain is not asked for credentials until one is
// needed.
func AWSCredentials(ctx context.Context, region string) (aws.Config, error) {
	opts := []func(*config.LoadOptions) error{
		config.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) {
			o.ExpiryWindow = RefreshBefore
			o.ExpiryWindowJitterFrac = 0.2
		}),
	}
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load the AWS configuration: %w", err)
	}
	return cfg, nil
}

// RDSIAM is a Postgres password source for Amazon RDS and Aurora IAM
// database authentication: each connection gets a new authentication token
// (valid 15 minutes for a connection to start) signed with the AWS
// credentials for the DSN's host, port and user. The role needs
// GRANT rds_iam and the IAM identity rds-db:connect on it.
type RDSIAM struct {
	// Region of the database; "" takes it from an RDS host name
	// (<name>.<id>.<region>.rds.amazonaws.com), else from the AWS
	// configuration.
	Region string
	// Credentials signs the tokens; nil loads AWSCredentials on first use.
	Credentials aws.CredentialsProvider

	once   sync.Once
	cfg    aws.Config
	cfgErr error
}

// Password builds a token for user on host:port.
func (r *RDSIAM) Password(ctx context.Context, host string, port uint16, user string) (string, error) {
	region := r.Region
	if region == "" {
		region = RDSRegion(host)
	}
	creds := r.Credentials
	if creds == nil || region == "" {
		r.once.Do(func() { r.cfg, r.cfgErr = AWSCredentials(context.WithoutCancel(ctx), r.Region) })
		if r.cfgErr != nil {
			return "", r.cfgErr
		}
		if creds == nil {
			creds = r.cfg.Credentials
		}
		if region == "" {
			region = r.cfg.Region
		}
	}
	if region == "" {
		return "", errors.New("no AWS region for the RDS IAM token: set the Postgres AWS region (the host is not an RDS endpoint name)")
	}
	if creds == nil {
		return "", errors.New("no AWS credentials found for the RDS IAM token")
	}
	tok, err := auth.BuildAuthToken(ctx, host+":"+strconv.Itoa(int(port)), region, user, creds)
	if err != nil {
		return "", fmt.Errorf("build the RDS IAM token: %w", err)
	}
	return tok, nil
}

// RDSRegion returns the region in an RDS or Aurora endpoint name
// (instance, cluster, reader, custom or proxy endpoint), "" for another
// host.
func RDSRegion(host string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	var rest string
	for _, suffix := range []string{".rds.amazonaws.com", ".rds.amazonaws.com.cn"} {
		if r, ok := strings.CutSuffix(host, suffix); ok {
			rest = r
			break
		}
	}
	if rest == "" {
		return ""
	}
	labels := strings.Split(rest, ".")
	if len(labels) < 3 {
		return ""
	}
	return labels[len(labels)-1]
}
