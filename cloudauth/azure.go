package cloudauth

import (
	"context"
	"fmt"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// AzurePostgresScope is the scope of a Microsoft Entra ID token for Azure
// Database for PostgreSQL.
const AzurePostgresScope = "https://ossrdbms-aad.database.windows.net/.default"

// AzureAD is a Postgres password source for Azure Database for PostgreSQL
// flexible server with Microsoft Entra ID authentication: an access token
// of azidentity's DefaultAzureCredential (environment service principal,
// workload identity, managed identity, the Azure CLI's login), cached by
// the SDK and renewed before it expires. The DSN's user is the Entra
// principal's name as created in the database.
type AzureAD struct {
	// Scope overrides AzurePostgresScope (another cloud).
	Scope string

	once sync.Once
	cred *azidentity.DefaultAzureCredential
	err  error
}

// Password returns the current access token.
func (a *AzureAD) Password(ctx context.Context, _ string, _ uint16, _ string) (string, error) {
	a.once.Do(func() { a.cred, a.err = azidentity.NewDefaultAzureCredential(nil) })
	if a.err != nil {
		return "", fmt.Errorf("set up the Azure default credential: %w", a.err)
	}
	scope := a.Scope
	if scope == "" {
		scope = AzurePostgresScope
	}
	tok, err := a.cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{scope}})
	if err != nil {
		return "", fmt.Errorf("get a Microsoft Entra ID token: %w", err)
	}
	return tok.Token, nil
}
