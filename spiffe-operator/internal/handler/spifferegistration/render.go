package spifferegistration

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/template"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// render returns the entry p wants for w, or a failure naming the field.
// It never returns a partial entry: any variable without a value, or a
// result that is not a valid SPIFFE ID or DNS name, fails the workload.
func (p *policy) render(w workload.Workload) (entries.Entry, *v1alpha1.Failure) {
	fail := func(reason, field string, err error) (entries.Entry, *v1alpha1.Failure) {
		return entries.Entry{}, &v1alpha1.Failure{Object: w.String(), Reason: reason, Message: fmt.Sprintf("%s: %v", field, err)}
	}
	vals := valuesOf(w)
	e, reason, field, err := p.renderTemplates(vals, p.parentID, w.Namespace, w.ServiceAccount)
	if err != nil {
		return fail(reason, field, err)
	}
	if p.podSelectors {
		if len(w.MatchLabels) == 0 || w.HasMatchExpressions {
			return fail(ReasonUnsafePodSelector, "spec.selector",
				fmt.Errorf("the templates name single workloads, so the entry must select the workload's pods by spec.selector.matchLabels; this workload has none, or also uses matchExpressions"))
		}
		keys := make([]string, 0, len(w.MatchLabels))
		for k := range w.MatchLabels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			e.Selectors = append(e.Selectors, entries.PodLabelSelector(k, w.MatchLabels[k]))
		}
	}
	e.Normalize()
	// Whoever may write the workload chooses how many labels it matches:
	// so many that SPIRE cannot look the entry up must fail the workload
	// alone, not the policy's pass for every namespace.
	if err := entries.CheckSelectorCount(len(e.Selectors)); err != nil {
		return fail(ReasonTooManySelectors, "spec.selector.matchLabels", err)
	}
	return e, nil
}

// valuesOf is what p's templates may name of w.
func valuesOf(w workload.Workload) template.Values {
	return template.Values{Namespace: w.Namespace, ServiceAccount: w.ServiceAccount, Kind: string(w.Kind), Name: w.Name, Labels: w.Labels}
}

// renderID renders p's SPIFFE ID template with vals into an ID of the
// policy's trust domain no longer than an ID may be.
func (p *policy) renderID(vals template.Values) (spiffeid.ID, error) {
	path, err := p.idTemplate.Render(vals)
	if err != nil {
		return spiffeid.ID{}, err
	}
	id, err := spiffeid.FromPath(p.trustDomain, "/"+path)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("renders %q: %w", path, err)
	}
	if err := entries.CheckIDLength(id); err != nil {
		return spiffeid.ID{}, err
	}
	return id, nil
}

// renderTemplates renders the SPIFFE ID, DNS name and selector templates
// with vals into an entry under parent for the pods of a namespace and
// service account; on failure it names the reason and the field at fault.
func (p *policy) renderTemplates(vals template.Values, parent spiffeid.ID, namespace, serviceAccount string) (
	e entries.Entry, reason, field string, err error) {
	id, err := p.renderID(vals)
	if err != nil {
		return e, ReasonInvalidSpiffeIDTemplate, "spec.spiffeIDTemplate", err
	}
	e = p.newEntry(id, parent, namespace, serviceAccount)
	for i, t := range p.dnsNames {
		name, err := t.Render(vals)
		if err == nil {
			err = validDNSName(name, strings.HasPrefix(t.String(), "*."))
		}
		if err != nil {
			return e, ReasonInvalidDNSNameTemplate, fmt.Sprintf("spec.dnsNameTemplates[%d]", i), err
		}
		e.DNSNames = append(e.DNSNames, name)
	}
	for i, t := range p.selectors {
		sel, err := t.Render(vals)
		if err != nil {
			return e, ReasonInvalidWorkloadSelectorTemplate, fmt.Sprintf("spec.workloadSelectorTemplates[%d]", i), err
		}
		e.Selectors = append(e.Selectors, sel)
	}
	return e, "", "", nil
}

// newEntry returns the entry of id under parent for the pods of a
// namespace and service account, with the policy's options.
func (p *policy) newEntry(id, parent spiffeid.ID, namespace, serviceAccount string) entries.Entry {
	return entries.Entry{
		SpiffeID: id,
		ParentID: parent,
		Selectors: []entries.Selector{
			{Type: "k8s", Value: "ns:" + namespace},
			{Type: "k8s", Value: "sa:" + serviceAccount},
		},
		X509SVIDTTL:   p.x509TTL,
		JWTSVIDTTL:    p.jwtTTL,
		FederatesWith: p.federatesWith,
		Hint:          p.hint,
		Admin:         p.admin,
		Downstream:    p.downstream,
	}
}

// validDNSName checks a rendered DNS name. A leading "*." (a wildcard) is
// allowed only where the template itself starts with it (wildcard): a
// variable renders one value, never template syntax, so a value of "*"
// (a pod annotation, say, which may hold anything) must not widen a name
// for one host into one for every host under the template's suffix.
func validDNSName(name string, wildcard bool) error {
	check := name
	if wildcard {
		check = strings.TrimPrefix(name, "*.")
	}
	if errs := validation.IsDNS1123Subdomain(check); len(errs) > 0 {
		return fmt.Errorf("renders %q, not a DNS name: %s", name, strings.Join(errs, "; "))
	}
	if err := entries.CheckDNSLabels(check); err != nil {
		return fmt.Errorf("renders %w", err)
	}
	return nil
}

// merge folds entries with the same key into one: workloads sharing a
// service account share its entry. DNS names are united; the lifetimes and
// hint come from the policy and are equal. The grants (admin, downstream,
// federation) of a failing workload's last good entry may be narrower than
// a fresh render's, never broader (entries.Entry.Within), so they are
// united too: what the entry grants does not depend on which workload
// comes first. The inputs are never modified; an input is returned as is
// unless it had to be merged.
func merge(in []*entries.Entry) []*entries.Entry {
	idx := make(map[entries.Key]int, len(in))
	out := make([]*entries.Entry, 0, len(in))
	for _, e := range in {
		k := e.Key()
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, e)
			continue
		}
		have := out[i]
		if len(e.DNSNames) == 0 && have.Grants().Covers(e.Grants()) {
			continue
		}
		m := *have
		m.DNSNames = append(slices.Clone(m.DNSNames), e.DNSNames...)
		m.Admin, m.Downstream = m.Admin || e.Admin, m.Downstream || e.Downstream
		m.FederatesWith = append(slices.Clone(m.FederatesWith), e.FederatesWith...)
		m.Normalize()
		out[i] = &m
	}
	return out
}
