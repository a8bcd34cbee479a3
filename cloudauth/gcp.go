package cloudauth

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

// GCPLoginScopes are the OAuth scopes of a Cloud SQL and an AlloyDB IAM
// database login token.
var GCPLoginScopes = []string{
	"https://www.googleapis.com/auth/sqlservice.login",
	"https://www.googleapis.com/auth/alloydb.login",
}

// GCPIAM is a Postgres password source for Cloud SQL and AlloyDB IAM
// database authentication: an OAuth 2.0 access token of the Application
// Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's
// application-default login, workload identity, the metadata server),
// reused while it is valid and renewed before it expires. The DSN's user
// is the IAM database user (a service account's e-mail without
// ".gserviceaccount.com").
type GCPIAM struct {
	// Scopes overrides GCPLoginScopes.
	Scopes []string

	once sync.Once
	src  oauth2.TokenSource
	err  error
}

// Password returns the current access token.
func (g *GCPIAM) Password(ctx context.Context, _ string, _ uint16, _ string) (string, error) {
	g.once.Do(func() {
		scopes := g.Scopes
		if len(scopes) == 0 {
			scopes = GCPLoginScopes
		}
		// The token source outlives this call: it must not end with ctx.
		g.src, g.err = google.DefaultTokenSource(context.WithoutCancel(ctx), scopes...)
	})
	if g.err != nil {
		return "", fmt.Errorf("find the Google application default credentials: %w", g.err)
	}
	tok, err := g.src.Token()
	if err != nil {
		return "", fmt.Errorf("get a Google access token: %w", err)
	}
	return tok.AccessToken, nil
}
