package spiffefederation

// Attacks on the rules a start bundle's authorities meet: each test states
// what it tries and the safe outcome it asserts.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// selfSigned returns a self-signed certificate shaped by mut, and its key.
func selfSigned(t *testing.T, mut func(*x509.Certificate)) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "authority"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	mut(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jwkOf returns a JWK (as a JSON object) of the EC key pub with the given
// use, kid, x5c certificates and, when priv is set, its private part "d".
func jwkOf(pub *ecdsa.PublicKey, use, kid string, priv *ecdsa.PrivateKey, x5c ...*x509.Certificate) map[string]any {
	k := map[string]any{"kty": "EC", "crv": "P-256",
		"x": b64u(pub.X.FillBytes(make([]byte, 32))), "y": b64u(pub.Y.FillBytes(make([]byte, 32)))}
	if use != "-" {
		k["use"] = use
	}
	if kid != "" {
		k["kid"] = kid
	}
	if priv != nil {
		k["d"] = b64u(priv.D.FillBytes(make([]byte, 32)))
	}
	if len(x5c) > 0 {
		var chain []string
		for _, c := range x5c {
			chain = append(chain, base64.StdEncoding.EncodeToString(c.Raw))
		}
		k["x5c"] = chain
	}
	return k
}

func keysDoc(t *testing.T, keys ...map[string]any) string {
	t.Helper()
	doc, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

func x509Key(c *x509.Certificate, use string) map[string]any {
	return jwkOf(c.PublicKey.(*ecdsa.PublicKey), use, "", nil, c)
}

// memoryFederations is an in-memory FederationAPI.
type memoryFederations struct {
	rels             map[string]*types.FederationRelationship
	created, updated []*types.FederationRelationship
	masks            []*types.FederationRelationshipMask
	deleted          []string
}

func (a *memoryFederations) Get(_ context.Context, td string) (*types.FederationRelationship, error) {
	return a.rels[td], nil
}
func (a *memoryFederations) Create(_ context.Context, r *types.FederationRelationship) error {
	a.created = append(a.created, r)
	if a.rels == nil {
		a.rels = map[string]*types.FederationRelationship{}
	}
	a.rels[r.TrustDomain] = r
	return nil
}
func (a *memoryFederations) Update(_ context.Context, r *types.FederationRelationship, m *types.FederationRelationshipMask) error {
	a.updated, a.masks = append(a.updated, r), append(a.masks, m)
	return nil
}
func (a *memoryFederations) Delete(_ context.Context, td string) error {
	a.deleted = append(a.deleted, td)
	delete(a.rels, td)
	return nil
}

// fixedFederations lists a fixed set of SpiffeFederations.
type fixedFederations struct{ items []v1alpha1.SpiffeFederation }

func (r *fixedFederations) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return nil
}
func (r *fixedFederations) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*v1alpha1.SpiffeFederationList).Items = append([]v1alpha1.SpiffeFederation(nil), r.items...)
	return nil
}

func federationObject(name string, mut func(*v1alpha1.SpiffeFederationSpec)) *v1alpha1.SpiffeFederation {
	return &v1alpha1.SpiffeFederation{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name), CreationTimestamp: metav1.Now()},
		Spec:       *spec(mut),
	}
}

func sha(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }

func reasonOf(err error) string { return ctrlerrors.Reason(err, "") }

// relOf builds what SPIRE would hold for spec (the bundle included).
func relOf(t *testing.T, s *v1alpha1.SpiffeFederationSpec, bundle *types.Bundle) *types.FederationRelationship {
	t.Helper()
	rel := &types.FederationRelationship{TrustDomain: string(s.TrustDomain), BundleEndpointUrl: s.BundleEndpointURL, TrustDomainBundle: bundle}
	if s.BundleEndpointProfile == v1alpha1.ProfileHTTPSWeb {
		rel.BundleEndpointProfile = &types.FederationRelationship_HttpsWeb{HttpsWeb: &types.HTTPSWebProfile{}}
	} else {
		rel.BundleEndpointProfile = &types.FederationRelationship_HttpsSpiffe{HttpsSpiffe: &types.HTTPSSPIFFEProfile{EndpointSpiffeId: s.EndpointSPIFFEID}}
	}
	return rel
}

// TestAdversarialJSONKeyWithUnknownUseIsNotDroppedSilently: go-spiffe's Parse
// skips every key whose `use` is neither x509-svid nor jwt-svid (nor
// wit-svid), without an error. A second CA given with use "sig", "X509-SVID"
// (wrong case) or no use at all is then silently not written: SPIRE starts
// from less than the spec gives. Same for a leaf given that way: it is
// silently ignored rather than refused as "not a CA".
func TestAdversarialJSONKeyWithUnknownUseIsNotDroppedSilently(t *testing.T) {
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	ca2, _ := selfSigned(t, func(c *x509.Certificate) { c.Subject.CommonName = "second CA" })
	leaf, _ := selfSigned(t, func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature })
	for _, use := range []string{"sig", "X509-SVID", "x509-svid ", "-", "wit-svid"} {
		for what, extra := range map[string]*x509.Certificate{"a second CA": ca2, "a leaf": leaf} {
			k := x509Key(extra, use)
			if use == "wit-svid" {
				k["kid"] = "w" // go-spiffe refuses a WIT key without kid; with one it keeps it and nothing writes it
			}
			doc := keysDoc(t, x509Key(ca, "x509-svid"), k)
			d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = doc }), "example.org")
			if fe == nil {
				t.Errorf("use %q, %s: accepted with %d X.509 authorities of the 2 given; the key was dropped without a word",
					use, what, len(d.bundle.X509Authorities))
			}
		}
	}
}

// TestAdversarialJSONX509KeyWithAChainIsRefused: an x509-svid key whose x5c holds
// two certificates (CA + another CA, or leaf + CA). go-spiffe refuses it.
func TestAdversarialJSONX509KeyWithAChainIsRefused(t *testing.T) {
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	ca2, _ := selfSigned(t, func(*x509.Certificate) {})
	leaf, _ := selfSigned(t, func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature })
	for name, chain := range map[string][]*x509.Certificate{"CA,CA": {ca, ca2}, "leaf,CA": {leaf, ca}} {
		doc := keysDoc(t, jwkOf(chain[0].PublicKey.(*ecdsa.PublicKey), "x509-svid", "", nil, chain...))
		if d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = doc }), "example.org"); fe == nil {
			t.Errorf("%s: accepted with %d X.509 authorities", name, len(d.bundle.X509Authorities))
		}
	}
}

// TestAdversarialJSONLeafX509KeyIsRefused: the non-CA rule reaches the JSON form
// (a leaf as an x509-svid key, also behind a duplicate of the CA).
func TestAdversarialJSONLeafX509KeyIsRefused(t *testing.T) {
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	leaf, _ := selfSigned(t, func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature })
	doc := keysDoc(t, x509Key(ca, "x509-svid"), x509Key(ca, "x509-svid"), x509Key(leaf, "x509-svid"))
	_, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = doc }), "example.org")
	if fe == nil || fe.reason != ReasonInvalidTrustDomainBundle || !strings.Contains(fe.Error(), "not a CA") {
		t.Errorf("a leaf x509-svid key: %v", fe)
	}
}

// TestAdversarialJSONDuplicateJWTKeyIDIsNotDroppedSilently: two jwt-svid keys
// with the same kid and different keys. go-spiffe keeps the last one in a
// map; the first is not written, without a word.
func TestAdversarialJSONDuplicateJWTKeyIDIsNotDroppedSilently(t *testing.T) {
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	doc := keysDoc(t, x509Key(ca, "x509-svid"), jwkOf(&k1.PublicKey, "jwt-svid", "k", nil), jwkOf(&k2.PublicKey, "jwt-svid", "k", nil))
	d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = doc }), "example.org")
	if fe == nil {
		t.Errorf("two jwt-svid keys with kid \"k\" accepted; %d JWT authorities written", len(d.bundle.JwtAuthorities))
	}
}

// TestAdversarialJSONPrivateKeyIsRefused: the PEM form refuses a private key
// (PrivateKeyInBundle). In the JSON form go-jose accepts a JWK with "d";
// go-spiffe takes only the x5c certificate of an x509-svid key, so the CA's
// private key in a cluster-scoped object is accepted without a word.
func TestAdversarialJSONPrivateKeyIsRefused(t *testing.T) {
	ca, key := selfSigned(t, func(*x509.Certificate) {})
	doc := keysDoc(t, jwkOf(&key.PublicKey, "x509-svid", "", key, ca))
	if d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = doc }), "example.org"); fe == nil {
		t.Errorf("an x509-svid JWK carrying its private key \"d\" was accepted (%d X.509 authorities)", len(d.bundle.X509Authorities))
	}
}

// TestAdversarialJSONJWTKeyWithALeafX5cAddsNoX509Authority: a jwt-svid key whose
// x5c is a leaf: its certificate must not become an X.509 authority, and
// with https_spiffe such a bundle counts as having none.
func TestAdversarialJSONJWTKeyWithALeafX5cAddsNoX509Authority(t *testing.T) {
	leaf, _ := selfSigned(t, func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature })
	doc := keysDoc(t, jwkOf(leaf.PublicKey.(*ecdsa.PublicKey), "jwt-svid", "k", nil, leaf))
	if _, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = doc }), "example.org"); fe == nil {
		t.Errorf("https_spiffe: a jwt-svid key with a leaf x5c was taken as an X.509 authority")
	}
	d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) {
		s.TrustDomainBundle, s.BundleEndpointProfile, s.EndpointSPIFFEID = doc, v1alpha1.ProfileHTTPSWeb, ""
	}), "example.org")
	if fe != nil || len(d.bundle.X509Authorities) != 0 || len(d.x509Authorities) != 0 {
		t.Errorf("https_web: %v / %v", fe, d)
	}
}

// TestAdversarialHTTPSSPIFFEWithAnEndpointInAnotherTrustDomain: SPIRE
// authenticates an https_spiffe endpoint with the bundle of the endpoint
// SPIFFE ID's trust domain (the SPIFFE Federation spec's "chaining trust";
// SPIRE's bundle client fetches the bundle of EndpointSPIFFEID.TrustDomain()).
// When the endpoint is served from another domain (here the local one), the
// federated domain's start bundle authenticates nothing, and a JWT-only one
// is fine. The new rule refuses it: a broadening of what is refused.
func TestAdversarialHTTPSSPIFFEWithAnEndpointInAnotherTrustDomain(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	doc := keysDoc(t, jwkOf(&k.PublicKey, "jwt-svid", "k", nil))
	_, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) {
		s.TrustDomainBundle, s.EndpointSPIFFEID = doc, "spiffe://example.org/spire/server"
	}), "example.org")
	if fe != nil {
		t.Errorf("https_spiffe served from another trust domain, JWT-only start bundle refused: %v", fe)
	}
}

// TestAdversarialAStartBundleHoldingAnotherDomainsCA: "a trust domain's
// authorities are published only from that trust domain's source". A SPIRE
// CA names its trust domain in a URI SAN (spiffe://<td>). A start bundle
// for partner.test holding a CA that names the local domain, or a third
// one, would let that domain mint spiffe://partner.test/... SVIDs that
// every federating workload accepts.
func TestAdversarialAStartBundleHoldingAnotherDomainsCA(t *testing.T) {
	for _, other := range []string{"spiffe://example.org", "spiffe://third.test"} {
		u, _ := url.Parse(other)
		ca, _ := selfSigned(t, func(c *x509.Certificate) { c.URIs = []*url.URL{u} })
		d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = pemOf(ca) }), "example.org")
		if fe == nil {
			t.Errorf("partner.test's start bundle holds a CA of %s; accepted with %d X.509 authorities", other, len(d.bundle.X509Authorities))
		}
	}
}

// TestAdversarialNoPanicOnOddBundles: odd documents get an error, never a panic.
func TestAdversarialNoPanicOnOddBundles(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	okp := map[string]any{"kty": "OKP", "crv": "X25519", "x": b64u(make([]byte, 32)), "use": "jwt-svid", "kid": "x"}
	oct := map[string]any{"kty": "oct", "k": b64u([]byte("secret")), "use": "jwt-svid", "kid": "s"}
	noKid := jwkOf(&k.PublicKey, "jwt-svid", "", nil)
	for name, doc := range map[string]string{
		"whitespace":      "   \n",
		"only {":          "{",
		"keys null":       `{"keys":null}`,
		"key {}":          `{"keys":[{}]}`,
		"X25519":          keysDoc(t, x509Key(ca, "x509-svid"), okp),
		"oct jwt key":     keysDoc(t, x509Key(ca, "x509-svid"), oct),
		"jwt key, no kid": keysDoc(t, x509Key(ca, "x509-svid"), noKid),
		"x509 no x5c":     keysDoc(t, jwkOf(&k.PublicKey, "x509-svid", "", nil)),
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", name, r)
				}
			}()
			if d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = doc }), "example.org"); fe == nil {
				t.Errorf("%s: accepted: %v", name, d.bundle)
			}
		}()
	}
}

func handlerOver(api *memoryFederations, now time.Time, items ...v1alpha1.SpiffeFederation) *Handler {
	return &Handler{Reader: &fixedFederations{items: items}, API: api, TrustDomain: "example.org",
		ClaimDelay: time.Second, Now: func() time.Time { return now }}
}

// TestAdversarialRecreatingAHeldRelationshipAfterItsStartBundleExpired: the
// object holds its relationship (https_web), its start bundle was written
// when valid and has expired since (normal: SPIRE refreshes from the
// endpoint). The relationship is then deleted in SPIRE (by hand, a
// datastore reset). Before the change the operator recreated it and SPIRE
// refreshed over Web PKI; now the object is Blocked until someone edits the
// spec, though the docs say "a start bundle that expires after SPIRE took it
// raises nothing".
func TestAdversarialRecreatingAHeldRelationshipAfterItsStartBundleExpired(t *testing.T) {
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	text := pemOf(ca)
	obj := federationObject("a", func(s *v1alpha1.SpiffeFederationSpec) {
		s.TrustDomainBundle, s.BundleEndpointProfile, s.EndpointSPIFFEID = text, v1alpha1.ProfileHTTPSWeb, ""
	})
	obj.Status.RelationshipTrustDomain, obj.Status.TrustDomainBundleSHA256 = "partner.test", sha(text)
	api := &memoryFederations{}
	err := handlerOver(api, ca.NotAfter.Add(24*time.Hour), *obj).CreateOrUpdate(context.Background(), obj)
	if err != nil || len(api.created) != 1 {
		t.Fatalf("held https_web relationship gone from SPIRE, start bundle expired since written: %v (%s); created %d",
			err, reasonOf(err), len(api.created))
	}
	if b := api.created[0].TrustDomainBundle; b != nil {
		t.Errorf("recreated with the expired start bundle (%d X.509 authorities)", len(b.X509Authorities))
	}
}

// TestAdversarialChangedBundleThatIsExpiredIsNotWrittenByUpdate: a held
// relationship whose spec bundle changes to an expired one: Blocked, no
// Update (the mask.TrustDomainBundle path).
func TestAdversarialChangedBundleThatIsExpiredIsNotWrittenByUpdate(t *testing.T) {
	now := time.Now()
	expired, _ := selfSigned(t, func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(-2*time.Hour), now.Add(-time.Hour) })
	obj := federationObject("a", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = pemOf(expired) })
	obj.Status.RelationshipTrustDomain, obj.Status.TrustDomainBundleSHA256 = "partner.test", sha("old bundle")
	api := &memoryFederations{rels: map[string]*types.FederationRelationship{"partner.test": relOf(t, &obj.Spec, nil)}}
	err := handlerOver(api, now, *obj).CreateOrUpdate(context.Background(), obj)
	if reasonOf(err) != ReasonInvalidTrustDomainBundle || !ctrlerrors.IsBlocked(err) || len(api.updated) != 0 {
		t.Errorf("got %v (%s), %d updates; want Blocked %s and no update", err, reasonOf(err), len(api.updated), ReasonInvalidTrustDomainBundle)
	}
	if obj.Status.TrustDomainBundleSHA256 != sha("old bundle") {
		t.Errorf("the status records a bundle that was not written")
	}
}

// TestAdversarialURLDriftWithAnUnchangedExpiredBundleIsStillCorrected: the
// bundle is unchanged (already written, since expired); a URL change must
// still be written, without the bundle.
func TestAdversarialURLDriftWithAnUnchangedExpiredBundleIsStillCorrected(t *testing.T) {
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	text := pemOf(ca)
	obj := federationObject("a", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = text })
	obj.Status.RelationshipTrustDomain, obj.Status.TrustDomainBundleSHA256 = "partner.test", sha(text)
	have := relOf(t, &obj.Spec, nil)
	have.BundleEndpointUrl = "https://old.partner.test"
	api := &memoryFederations{rels: map[string]*types.FederationRelationship{"partner.test": have}}
	err := handlerOver(api, ca.NotAfter.Add(time.Hour), *obj).CreateOrUpdate(context.Background(), obj)
	if err != nil || len(api.updated) != 1 || api.masks[0].TrustDomainBundle || !api.masks[0].BundleEndpointUrl {
		t.Errorf("got %v, %d updates %v; want the URL updated without the bundle", err, len(api.updated), api.masks)
	}
}

// TestAdversarialAdoptionUnderAClaimWritesNothing: claimed && have != nil with an
// expired bundle: adopted (the same relationship), nothing written.
func TestAdversarialAdoptionUnderAClaimWritesNothing(t *testing.T) {
	now := time.Now()
	expired, _ := selfSigned(t, func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(-2*time.Hour), now.Add(-time.Hour) })
	obj := federationObject("a", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = pemOf(expired) })
	obj.Status.ClaimedTrustDomain = "partner.test"
	d, fe := build(&obj.Spec, "example.org")
	if fe != nil {
		t.Fatal(fe)
	}
	api := &memoryFederations{rels: map[string]*types.FederationRelationship{"partner.test": relOf(t, &obj.Spec, d.bundle)}}
	err := handlerOver(api, now, *obj).CreateOrUpdate(context.Background(), obj)
	if err != nil || len(api.created)+len(api.updated) != 0 || obj.Status.RelationshipTrustDomain != "partner.test" {
		t.Errorf("got %v, %d creates, %d updates, held %q", err, len(api.created), len(api.updated), obj.Status.RelationshipTrustDomain)
	}
}

// TestAdversarialDryRunDoesNotSkipTheTimeCheck: in dry run the claim pass is
// skipped and the create is simulated; an expired bundle is still reported
// as such, not as a clean dry run.
func TestAdversarialDryRunDoesNotSkipTheTimeCheck(t *testing.T) {
	now := time.Now()
	expired, _ := selfSigned(t, func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(-2*time.Hour), now.Add(-time.Hour) })
	obj := federationObject("a", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = pemOf(expired) })
	api := &memoryFederations{}
	h := handlerOver(api, now, *obj)
	h.DryRun = true
	err := h.CreateOrUpdate(context.Background(), obj)
	if reasonOf(err) != ReasonInvalidTrustDomainBundle || len(api.created) != 0 {
		t.Errorf("dry run: %v (%s), %d creates", err, reasonOf(err), len(api.created))
	}
}

// TestAdversarialClaimIsNotRecordedForABundleThatCannotBeWritten: the first pass
// records a claim for a bundle whose CAs are all expired; the second pass
// is then Blocked, holding the claim (others for the trust domain see
// TrustDomainTaken) until the spec is fixed. The bundle could be judged
// before the claim.
func TestAdversarialClaimIsNotRecordedForABundleThatCannotBeWritten(t *testing.T) {
	now := time.Now()
	expired, _ := selfSigned(t, func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(-2*time.Hour), now.Add(-time.Hour) })
	obj := federationObject("a", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = pemOf(expired) })
	api := &memoryFederations{}
	h := handlerOver(api, now, *obj)
	err := h.CreateOrUpdate(context.Background(), obj)
	if obj.Status.ClaimedTrustDomain != "" {
		err2 := h.CreateOrUpdate(context.Background(), obj)
		t.Errorf("claim recorded (%s) for an expired-only bundle; next pass: %s, claim kept: %q",
			reasonOf(err), reasonOf(err2), obj.Status.ClaimedTrustDomain)
	}
	other := federationObject("b", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = pemOf(expired) })
	other.CreationTimestamp = metav1.NewTime(now.Add(time.Hour))
	if err := handlerOver(api, now, *obj, *other).CreateOrUpdate(context.Background(), other); reasonOf(err) != ReasonTrustDomainTaken {
		t.Logf("the newer object: %v", err)
	}
}

// TestAdversarialDeleteUnderAClaimOfAPreUpgradeRelationship: an operator before
// the change claimed the trust domain and created the relationship with a
// start bundle holding a leaf (then accepted); the status write recording
// it was lost. After the upgrade, Delete builds the spec, build refuses the
// leaf, and Delete returns nil: the finalizer goes and the relationship the
// object created stays in SPIRE for ever.
func TestAdversarialDeleteUnderAClaimOfAPreUpgradeRelationship(t *testing.T) {
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	leaf, _ := selfSigned(t, func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature })
	obj := federationObject("a", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = pemOf(ca) + pemOf(leaf) })
	obj.Status.ClaimedTrustDomain = "partner.test"
	old := &types.Bundle{TrustDomain: "partner.test", X509Authorities: []*types.X509Certificate{{Asn1: ca.Raw}, {Asn1: leaf.Raw}}}
	api := &memoryFederations{rels: map[string]*types.FederationRelationship{"partner.test": relOf(t, &obj.Spec, old)}}
	err := handlerOver(api, time.Now(), *obj).Delete(context.Background(), obj)
	if err == nil && len(api.deleted) == 0 {
		t.Errorf("Delete under a claim returned nil and left the relationship this object created in SPIRE")
	}
}

// TestAdversarialHeldPreUpgradeRelationshipWithALeafIsReportedAndDeletable: a
// held relationship whose spec (accepted before) holds a leaf: a clear
// InvalidTrustDomainBundle, nothing written, and Delete still deletes.
func TestAdversarialHeldPreUpgradeRelationshipWithALeafIsReportedAndDeletable(t *testing.T) {
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	leaf, _ := selfSigned(t, func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature })
	text := pemOf(ca) + pemOf(leaf)
	obj := federationObject("a", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = text })
	obj.Status.RelationshipTrustDomain, obj.Status.TrustDomainBundleSHA256 = "partner.test", sha(text)
	have := relOf(t, &obj.Spec, nil)
	have.BundleEndpointUrl = "https://old.partner.test"
	api := &memoryFederations{rels: map[string]*types.FederationRelationship{"partner.test": have}}
	h := handlerOver(api, time.Now(), *obj)
	err := h.CreateOrUpdate(context.Background(), obj)
	if reasonOf(err) != ReasonInvalidTrustDomainBundle || len(api.updated) != 0 {
		t.Errorf("got %v (%s), %d updates", err, reasonOf(err), len(api.updated))
	}
	if err := h.Delete(context.Background(), obj); err != nil || len(api.deleted) != 1 {
		t.Errorf("Delete: %v, deleted %v", err, api.deleted)
	}
}
