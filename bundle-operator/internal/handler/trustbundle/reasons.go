package trustbundle

// Condition types the handler sets besides the framework's Ready and Processing.
const (
	// TypeSourcesValid is True when every source passed validation.
	TypeSourcesValid = "SourcesValid"
	// TypeTargetsInSync is True when every target holds the current bundle.
	TypeTargetsInSync = "TargetsInSync"
)

// Condition reasons of the handler. Source problems use the reasons of
// packages source and bundle (e.g. PrivateKeyInBundle, SpireUnavailable).
const (
	// ReasonValid: every source passed validation.
	ReasonValid = "Valid"
	// ReasonInSync: every target holds the current bundle.
	ReasonInSync = "InSync"
	// ReasonTargetsFailed: some targets could not be written; see
	// status.failedTargets.
	ReasonTargetsFailed = "TargetsFailed"
	// ReasonNoSpireSource: a target names a SPIFFE format but no source is
	// a spire source, the only source of a trust domain's authorities.
	ReasonNoSpireSource = "NoSpireSource"
	// ReasonFormatNotRenderable: a format cannot be rendered (e.g. a JWT
	// key type a JWKS cannot hold); only the targets naming it fail.
	ReasonFormatNotRenderable = "FormatNotRenderable"
	// ReasonBundleTooLarge: a rendered target or the status would exceed
	// what Kubernetes stores; nothing is written.
	ReasonBundleTooLarge = "BundleTooLarge"
	// ReasonSecretTargetsDisabled: a Secret target while the operator runs
	// without --allow-secret-targets.
	ReasonSecretTargetsDisabled = "SecretTargetsDisabled"
	// ReasonClusterTrustBundlesDisabled: a ClusterTrustBundle target while
	// the operator runs without --cluster-trust-bundles.
	ReasonClusterTrustBundlesDisabled = "ClusterTrustBundlesDisabled"
	// ReasonKeysCollide: two formats of a target would write the same key.
	ReasonKeysCollide = "KeysCollide"
	// ReasonNoFederatedTrustDomains: a target names only
	// keys.federatedSpiffe and the spire source lists no federated trust
	// domain, so it would hold nothing; it keeps what it holds.
	ReasonNoFederatedTrustDomains = "NoFederatedTrustDomains"
	// ReasonInvalidSelector: spec.target.namespaceSelector does not parse.
	ReasonInvalidSelector = "InvalidNamespaceSelector"
)

// Event reasons of the handler.
const (
	// ReasonLastGoodBundle: while the sources fail, targets that did not
	// exist yet were created with the last good bundle (the one the existing
	// targets hold). The conditions keep the source's reason.
	ReasonLastGoodBundle = "LastGoodBundle"
	// ReasonInjectionSkipped (Warning): an object annotated for injection
	// has no caBundle field (a CRD without a conversion webhook, a webhook
	// configuration without webhooks); it is skipped, the pass goes on.
	ReasonInjectionSkipped = "InjectionSkipped"
	// ReasonTargetsLeftInPlace (Warning): targets to release (in a
	// namespace no longer selected, or of a deleted TrustBundle) that
	// another writer shares and that the API server refuses without our
	// keys (made immutable, say) are left as they are; the pass, or the
	// deletion, goes on.
	ReasonTargetsLeftInPlace = "TargetsLeftInPlace"
)
