package spifferegistration

import (
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// Condition reasons of Ready=False; each names the field or the party at fault.
const (
	// ReasonInvalidTrustDomain: spec.trustDomain is not a trust domain name.
	ReasonInvalidTrustDomain = "InvalidTrustDomain"
	// ReasonTrustDomainMismatch: spec.trustDomain is not the SPIRE server's.
	ReasonTrustDomainMismatch = "TrustDomainMismatch"
	// ReasonInvalidParentID: spec.parentID is not a SPIFFE ID of the trust domain.
	ReasonInvalidParentID = "InvalidParentID"
	// ReasonInvalidParentIDTemplate: spec.parentIDTemplate does not parse,
	// or renders an invalid parent ID for some node.
	ReasonInvalidParentIDTemplate = "InvalidParentIDTemplate"
	// ReasonClusterNameUnset: the parent ID template uses {clusterName} (the
	// default does) and the operator runs without --cluster-name.
	ReasonClusterNameUnset = "ClusterNameUnset"
	// ReasonInvalidSpiffeIDTemplate: spec.spiffeIDTemplate does not parse, or
	// renders an invalid SPIFFE ID for some workload.
	ReasonInvalidSpiffeIDTemplate = "InvalidSpiffeIDTemplate"
	// ReasonInvalidDNSNameTemplate: an entry of spec.dnsNameTemplates does not
	// parse, or renders an invalid DNS name for some workload.
	ReasonInvalidDNSNameTemplate = "InvalidDNSNameTemplate"
	// ReasonInvalidWorkloadSelectorTemplate: an entry of
	// spec.workloadSelectorTemplates does not parse, or renders a selector
	// the k8s workload attestor never produces for some workload.
	ReasonInvalidWorkloadSelectorTemplate = "InvalidWorkloadSelectorTemplate"
	// ReasonInvalidFederatesWith: an entry of spec.federatesWith is not a trust domain.
	ReasonInvalidFederatesWith = "InvalidFederatesWith"
	// ReasonInvalidTTL: spec.x509SVIDTTL or spec.jwtSVIDTTL is out of range.
	ReasonInvalidTTL = "InvalidTTL"
	// ReasonInvalidNamespaceSelector: spec.namespaceSelector does not parse.
	ReasonInvalidNamespaceSelector = "InvalidNamespaceSelector"
	// ReasonInvalidPodSelector: spec.podSelector does not parse.
	ReasonInvalidPodSelector = "InvalidPodSelector"
	// ReasonInvalidWorkloadSelector: spec.workloadSelector does not parse.
	ReasonInvalidWorkloadSelector = "InvalidWorkloadSelector"
	// ReasonPodAndWorkloadSelector: the policy sets both spec.podSelector
	// and spec.workloadSelector, which admission refuses since; an object
	// stored before may still hold both.
	ReasonPodAndWorkloadSelector = "PodAndWorkloadSelector"
	// ReasonUnsafePodSelector: a per-workload template needs the workload's
	// pods told apart by spec.selector.matchLabels, and the workload has none
	// (or also uses matchExpressions, which SPIRE selectors cannot express).
	ReasonUnsafePodSelector = "UnsafePodSelector"
	// ReasonTooManySelectors: the workload's entry would carry more
	// selectors than an entry may (entries.MaxSelectors), most of them the
	// k8s:pod-label selectors of its spec.selector.matchLabels.
	ReasonTooManySelectors = "TooManySelectors"
	// ReasonSharesPodsWithAnotherPolicy: a fallback policy leaves a workload
	// unregistered because its entry and the one another policy holds for
	// another workload would both select the pods of one of them (the same
	// namespace and service account): those pods would hold two identities.
	ReasonSharesPodsWithAnotherPolicy = "SharesPodsWithAnotherPolicy"
	// ReasonUnsafeAdmin: spec.admin or spec.downstream on a policy that does
	// not select one namespace by name and one service account.
	ReasonUnsafeAdmin = "UnsafeAdmin"
	// ReasonFederatedBundleMissing: SPIRE refused an entry because it holds
	// no bundle of a trust domain of spec.federatesWith: a SpiffeFederation
	// for it (with a trustDomainBundle, or once SPIRE fetched the bundle
	// from its endpoint) lets SPIRE accept it.
	ReasonFederatedBundleMissing = entrysync.ReasonFederatedBundleMissing
	// ReasonEntryRejected: SPIRE refused some entries (InvalidArgument or similar).
	ReasonEntryRejected = "EntryRejected"
	// ReasonEntryIDNotKept: SPIRE created an entry under another ID than the
	// one asked for (custom entry IDs need SPIRE 1.8 or later); the operator
	// deleted it again, since it could not recognise it later. Upgrade SPIRE.
	ReasonEntryIDNotKept = entrysync.ReasonEntryIDNotKept
	// ReasonEntryIDTaken: another SPIRE entry (made by hand, or by an
	// operator sharing this one's entry-ID prefix) holds the ID an entry
	// needs; the operator leaves it alone. Delete it, or give the operator
	// its own prefix.
	ReasonEntryIDTaken = entrysync.ReasonEntryIDTaken
	// ReasonSpireUnavailable: SPIRE could not be reached; the pass is retried
	// with backoff and nothing is lost.
	ReasonSpireUnavailable = "SpireUnavailable"
	// ReasonSpireFailedEntries: SPIRE answered, but failed single entries
	// for a cause that may pass (it answers Internal for a datastore
	// error); the pass is retried with backoff, and the message names up
	// to three of them with SPIRE's words.
	ReasonSpireFailedEntries = "SpireFailedEntries"
	// ReasonSpireRefusedDeletes: SPIRE answered, but refused to delete
	// entries the operator no longer wants, with a code retrying may not
	// mend (FailedPrecondition, PermissionDenied on the entry, and the
	// like); the entries stay in SPIRE, the pass is retried with backoff,
	// and the message names them with SPIRE's words.
	ReasonSpireRefusedDeletes = "SpireRefusedDeletes"
	// ReasonSpirePermissionDenied: SPIRE refused the operator's identity;
	// register it as an admin (admin_ids or an admin entry).
	ReasonSpirePermissionDenied = "SpirePermissionDenied"
	// ReasonSpireChanged: SPIRE changed during the pass; retried at once.
	ReasonSpireChanged = "SpireChanged"
	// ReasonWaitingForFirstPasses: the object is being deleted and holds
	// entries, and the operator started recently: its entries are deleted
	// once every object that existed at startup has had its first pass, so
	// that each goes to the next object that wants it.
	ReasonWaitingForFirstPasses = "WaitingForFirstPasses"
	// ReasonDryRun: the operator runs with --dry-run and wrote nothing.
	ReasonDryRun = "DryRun"
)

// DryRunError is what a pass that succeeded returns under --dry-run, so
// that Ready=False says nothing was written.
func DryRunError() error {
	return ctrlerrors.WithReason(ReasonDryRun, ctrlerrors.BlockedErrorf(
		"dry run (--dry-run): nothing was written to SPIRE; the writes this object needs are logged and counted in "+
			"trustplane_spire_dry_run_writes_total, and the entry counts are those that would be registered"))
}
