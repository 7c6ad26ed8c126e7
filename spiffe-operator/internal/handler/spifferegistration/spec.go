package spifferegistration

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/selectortemplate"
	"github.com/trustplane/trustplane/spiffe-operator/internal/template"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// policy is a validated, compiled SpiffeRegistrationSpec.
type policy struct {
	trustDomain spiffeid.TrustDomain
	// parentID is the fixed parent; zero in per-node mode.
	parentID spiffeid.ID
	// parentTemplate renders the parent of each (workload, node) entry;
	// nil with a fixed parent.
	parentTemplate *template.Template
	clusterName    string
	// perPod is true for one entry per pod (k8s:pod-uid).
	perPod bool
	// pods selects pods by label in a policy of pods (spec.podSelector); nil
	// for a policy of workloads.
	pods labels.Selector
	// autoDNS adds the DNS names of the Services selecting the pods.
	autoDNS bool
	// others, for a fallback policy, are the policies it yields to.
	others     *yield
	idTemplate *template.Template
	dnsNames   []*template.Template
	selectors  []*selectortemplate.Template
	selection  workload.Selection
	// podSelectors is true when entries must also carry the workload's
	// matchLabels as pod-label selectors.
	podSelectors  bool
	x509TTL       int32
	jwtTTL        int32
	federatesWith []string
	hint          string
	admin         bool
	downstream    bool
}

// specError is a spec field that failed validation.
type specError struct {
	reason string
	field  string
	err    error
}

func (e *specError) Error() string { return fmt.Sprintf("%s: %v", e.field, e.err) }

func fieldErr(reason, field string, err error) *specError {
	return &specError{reason: reason, field: field, err: err}
}

// compile validates spec the way admission cannot (the same rules run in
// the CRD where CEL can express them). serverTD, when set, is the SPIRE
// server's trust domain; clusterName is the operator's --cluster-name.
func compile(spec *v1alpha1.SpiffeRegistrationSpec, serverTD, clusterName string) (*policy, *specError) {
	p := &policy{hint: spec.Hint, admin: spec.Admin, downstream: spec.Downstream, clusterName: clusterName}
	var err error
	if p.trustDomain, err = spiffeid.TrustDomainFromString(string(spec.TrustDomain)); err != nil {
		return nil, fieldErr(ReasonInvalidTrustDomain, "spec.trustDomain", err)
	}
	if serverTD != "" && p.trustDomain.Name() != serverTD {
		return nil, fieldErr(ReasonTrustDomainMismatch, "spec.trustDomain",
			fmt.Errorf("%q is not the SPIRE server's trust domain %q", p.trustDomain.Name(), serverTD))
	}
	if err := p.compileParent(spec); err != nil {
		return nil, err
	}
	src := spec.SpiffeIDTemplate
	if src == "" {
		src = v1alpha1.DefaultSpiffeIDTemplate
	}
	if spec.PodSelector != nil && spec.WorkloadSelector != nil {
		// Admission refuses this since the CEL rule; an object stored
		// before may hold both, and would select pods ignoring one of them.
		return nil, fieldErr(ReasonPodAndWorkloadSelector, "spec.workloadSelector",
			errors.New("does not apply to a policy of pods (spec.podSelector): remove it, and select the pods by spec.podSelector"))
	}
	parse := template.Parse
	if spec.PodSelector != nil {
		parse = template.ParsePod
		if p.pods, err = metav1.LabelSelectorAsSelector(spec.PodSelector); err != nil {
			return nil, fieldErr(ReasonInvalidPodSelector, "spec.podSelector", err)
		}
	}
	if p.idTemplate, err = parse(src); err != nil {
		return nil, fieldErr(ReasonInvalidSpiffeIDTemplate, "spec.spiffeIDTemplate", err)
	}
	// Entries of a pod policy carry the pod's UID: no pod-label selectors needed.
	p.podSelectors = p.idTemplate.PerWorkload() && p.pods == nil
	for i, s := range spec.DNSNameTemplates {
		t, err := parse(s)
		if err != nil {
			return nil, fieldErr(ReasonInvalidDNSNameTemplate, fmt.Sprintf("spec.dnsNameTemplates[%d]", i), err)
		}
		p.podSelectors = p.podSelectors || t.PerWorkload() && p.pods == nil
		p.dnsNames = append(p.dnsNames, t)
	}
	for i, s := range spec.WorkloadSelectorTemplates {
		t, err := selectortemplate.Parse(s)
		if err != nil {
			return nil, fieldErr(ReasonInvalidWorkloadSelectorTemplate, fmt.Sprintf("spec.workloadSelectorTemplates[%d]", i), err)
		}
		p.selectors = append(p.selectors, t)
	}
	for i, f := range spec.FederatesWith {
		td, err := spiffeid.TrustDomainFromString(string(f))
		if err != nil {
			return nil, fieldErr(ReasonInvalidFederatesWith, fmt.Sprintf("spec.federatesWith[%d]", i), err)
		}
		p.federatesWith = append(p.federatesWith, td.Name())
	}
	if p.x509TTL, err = ttlSeconds(spec.X509SVIDTTL, time.Hour); err != nil {
		return nil, fieldErr(ReasonInvalidTTL, "spec.x509SVIDTTL", err)
	}
	if p.jwtTTL, err = ttlSeconds(spec.JWTSVIDTTL, 0); err != nil {
		return nil, fieldErr(ReasonInvalidTTL, "spec.jwtSVIDTTL", err)
	}
	var serr *specError
	if p.selection, serr = compileSelection(spec); serr != nil {
		return nil, serr
	}
	p.perPod = spec.EntryGranularity == v1alpha1.EntryPerPod
	p.autoDNS = spec.AutoPopulateDNSNames
	if (spec.Admin || spec.Downstream) && !singleAccount(spec) {
		field := "spec.admin"
		if !spec.Admin {
			field = "spec.downstream"
		}
		return nil, fieldErr(ReasonUnsafeAdmin, field, fmt.Errorf(
			"grants SPIRE admin or downstream rights, so the policy must select one namespace by name (namespaceSelector.matchLabels[%s]) and set serviceAccountName",
			v1alpha1.NamespaceNameLabel))
	}
	return p, nil
}

// compileSelection compiles what spec selects besides pods: namespaces,
// workloads, kinds and service account. A fallback policy yields on it to
// a policy whose spec fails elsewhere, since that policy keeps what it
// registered.
func compileSelection(spec *v1alpha1.SpiffeRegistrationSpec) (workload.Selection, *specError) {
	var (
		sel workload.Selection
		err error
	)
	if sel.Namespaces, err = selector(spec.NamespaceSelector); err != nil {
		return sel, fieldErr(ReasonInvalidNamespaceSelector, "spec.namespaceSelector", err)
	}
	if sel.Workloads, err = selector(spec.WorkloadSelector); err != nil {
		return sel, fieldErr(ReasonInvalidWorkloadSelector, "spec.workloadSelector", err)
	}
	sel.ServiceAccount = spec.ServiceAccountName
	sel.IgnoreNamespaces = spec.IgnoreNamespaces
	if spec.IgnoreNamespaces == nil {
		sel.IgnoreNamespaces = v1alpha1.DefaultIgnoreNamespaces()
	}
	sel.Kinds = spec.WorkloadKinds
	if len(sel.Kinds) == 0 {
		sel.Kinds = []v1alpha1.WorkloadKind{v1alpha1.WorkloadKindDeployment}
	}
	return sel, nil
}

// compileParent sets the fixed parent, or the per-node parent template.
func (p *policy) compileParent(spec *v1alpha1.SpiffeRegistrationSpec) *specError {
	if spec.ParentID != "" && spec.ParentIDTemplate != "" {
		return fieldErr(ReasonInvalidParentID, "spec.parentID",
			fmt.Errorf("set parentID (one fixed parent) or parentIDTemplate (a parent per node), not both"))
	}
	if spec.ParentID != "" {
		var err error
		if p.parentID, err = spiffeid.FromString(spec.ParentID); err != nil {
			return fieldErr(ReasonInvalidParentID, "spec.parentID", err)
		}
		if !p.parentID.MemberOf(p.trustDomain) || p.parentID.Path() == "" {
			return fieldErr(ReasonInvalidParentID, "spec.parentID",
				fmt.Errorf("%q is not a non-root SPIFFE ID in trust domain %q", spec.ParentID, p.trustDomain.Name()))
		}
		if err := entries.CheckIDLength(p.parentID); err != nil {
			return fieldErr(ReasonInvalidParentID, "spec.parentID", err)
		}
		return nil
	}
	src, field := spec.ParentIDTemplate, "spec.parentIDTemplate"
	if src == "" {
		src, field = v1alpha1.DefaultParentIDTemplate, "spec.parentIDTemplate (default "+v1alpha1.DefaultParentIDTemplate+")"
	}
	t, err := template.ParseParent(src)
	if err != nil {
		return fieldErr(ReasonInvalidParentIDTemplate, field, err)
	}
	if t.Uses(template.VarClusterName) && p.clusterName == "" {
		return fieldErr(ReasonClusterNameUnset, field,
			fmt.Errorf("uses {clusterName} and the operator runs without --cluster-name; set it to the cluster name of the SPIRE server's k8s_psat node attestor"))
	}
	p.parentTemplate = t
	return nil
}

// perNode reports whether entries hang under the agent of each node that
// runs the workload's pods rather than under one fixed parent.
func (p *policy) perNode() bool { return p.parentTemplate != nil }

// grants returns what p grants each entry beyond its identity.
func (p *policy) grants() entries.Grants {
	return entries.Grants{Admin: p.admin, Downstream: p.downstream, FederatesWith: p.federatesWith}
}

// byPods reports whether what a workload needs depends on its pods (per-node
// parents or per-pod entries), so every pass must read them.
func (p *policy) byPods() bool { return p.perNode() || p.perPod }

// nodeParent renders the parent ID of the entries of pods on node n.
func (p *policy) nodeParent(n nodes.Node) (spiffeid.ID, error) {
	path, err := p.parentTemplate.Render(template.Values{
		NodeName: n.Name, NodeUID: n.UID, ClusterName: p.clusterName, TrustDomain: p.trustDomain.Name(),
	})
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

// singleAccount reports whether spec selects at most one namespace, by the
// name label the API server sets, and one service account.
func singleAccount(spec *v1alpha1.SpiffeRegistrationSpec) bool {
	if spec.ServiceAccountName == "" || spec.NamespaceSelector == nil {
		return false
	}
	_, ok := spec.NamespaceSelector.MatchLabels[v1alpha1.NamespaceNameLabel]
	return ok
}

func ttlSeconds(d *metav1.Duration, def time.Duration) (int32, error) {
	v := def
	if d != nil {
		v = d.Duration
	}
	if v < 0 || v.Seconds() > math.MaxInt32 {
		return 0, fmt.Errorf("%s is out of range [0s, %ds]", v, math.MaxInt32)
	}
	return int32(v / time.Second), nil
}

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, nil
	}
	return metav1.LabelSelectorAsSelector(s)
}
