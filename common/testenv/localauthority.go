package testenv

import (
	"encoding/json"
	"fmt"
)

// LocalAuthorityArgs are the spire-server CLI arguments of
// `localauthority x509 <args> -output json`, for Spire.CLI or a cluster's
// own way of running the server's CLI.
func LocalAuthorityArgs(args ...string) []string {
	out := append([]string{"localauthority", "x509"}, args...)
	return append(out, "-output", "json")
}

// ParseLocalAuthorities reads the JSON answer of `spire-server
// localauthority x509 ... -output json` and returns its authority IDs by
// slot (active, prepared, old, prepared_authority, ...).
func ParseLocalAuthorities(out string) (map[string]string, error) {
	var doc map[string]struct {
		AuthorityID string `json:"authority_id"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, fmt.Errorf("parse localauthority answer %q: %w", out, err)
	}
	ids := make(map[string]string, len(doc))
	for slot, a := range doc {
		ids[slot] = a.AuthorityID
	}
	return ids, nil
}
