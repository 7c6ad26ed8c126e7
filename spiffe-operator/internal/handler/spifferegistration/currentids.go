package spifferegistration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/internal/template"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// maxFailingChecks bounds the workloads whose render fails that one record
// is checked against (a template match each); a record that would need
// more is refused, so that a namespace of many failing workloads cannot
// make the first pass after a start slow.
const maxFailingChecks = 64

// currentIDs is what the policy's SPIFFE ID template renders now for the
// workloads of the namespaces whose SPIRE-held records a pass judges,
// whichever service account they run as and whatever selects them: such a
// record is no workload's when the template gives its SPIFFE ID to
// another.
type currentIDs struct {
	// owner maps each SPIFFE ID the template renders now to its workload.
	owner map[spiffeid.ID]workloadKey
	// failing are, by namespace, the workloads whose render fails now.
	failing map[string][]workload.Workload
}

// currentIDsOf renders p's SPIFFE ID template for every workload of
// namespaces, of every kind (one the policy stopped selecting still holds
// the identity it gave).
func currentIDsOf(ctx context.Context, p *policy, l workload.Lister, namespaces map[string]bool) (*currentIDs, error) {
	c := &currentIDs{owner: map[spiffeid.ID]workloadKey{}, failing: map[string][]workload.Workload{}}
	kinds := slices.Sorted(maps.Keys(workload.Objects()))
	for ns := range namespaces {
		for _, kind := range kinds {
			err := l.InNamespace(ctx, kind, ns, func(obj client.Object) {
				w, ok := workload.FromObject(obj)
				if !ok {
					return
				}
				id, err := p.renderID(valuesOf(w))
				if err != nil {
					c.failing[ns] = append(c.failing[ns], w)
					return
				}
				c.owner[id] = keyOf(w)
			})
			if err != nil {
				return nil, fmt.Errorf("list %ss of namespace %s: %w", kind, ns, err)
			}
		}
	}
	return c, nil
}

// claimant returns the workload other than w that p's template gives id
// to now: the one it renders id for, or one whose render fails and for
// which it could render id whatever its labels. ok is false when there is
// none.
func (p *policy) claimant(id spiffeid.ID, w workload.Workload, c *currentIDs) (who string, ok bool) {
	if own, err := p.renderID(valuesOf(w)); err == nil && own == id {
		// The template gives it to w now (its render fails elsewhere):
		// others that share it do not make it theirs alone.
		return "", false
	}
	if o, found := c.owner[id]; found && o != keyOf(w) {
		return fmt.Sprintf("%s %s/%s", o.kind, o.namespace, o.name), true
	}
	path := strings.TrimPrefix(id.Path(), "/")
	byName := p.idTemplate.Uses(template.VarName)
	// Workloads the template cannot tell apart match alike.
	type likeness struct{ kind, name, serviceAccount string }
	judged := map[likeness]bool{}
	for _, m := range c.failing[w.Namespace] {
		if m.Kind == w.Kind && m.Name == w.Name || byName && !strings.Contains(path, m.Name) {
			// A template that names the workload renders its name whole.
			continue
		}
		var key likeness
		if p.idTemplate.Uses(template.VarKind) {
			key.kind = string(m.Kind)
		}
		if byName {
			key.name = m.Name
		}
		if p.idTemplate.Uses(template.VarServiceAccount) {
			key.serviceAccount = m.ServiceAccount
		}
		if judged[key] {
			continue
		}
		if len(judged) == maxFailingChecks {
			return fmt.Sprintf("one of over %d workloads of namespace %s whose render fails", maxFailingChecks, w.Namespace), true
		}
		judged[key] = true
		// Matches takes any value for every label variable.
		if p.idTemplate.Matches(path, valuesOf(m)) {
			return m.String(), true
		}
	}
	return "", false
}
