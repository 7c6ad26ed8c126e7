// Package metricsauth guards an operator's metrics endpoint with the API
// server's own authentication and authorization. A request must carry a
// bearer token that the API server accepts (a TokenReview), and the user
// that token names must be allowed to get the request's path as a
// non-resource URL (a SubjectAccessReview): Prometheus with a service
// account bound to a ClusterRole of
//
//	rules: [{nonResourceURLs: ["/metrics"], verbs: ["get"]}]
//
// reads the metrics, and a pod of a tenant does not. Everything else gets
// 401 (no token, or one the API server does not accept) or 403 (a user
// without the grant), and never reaches the metrics handler; when a review
// cannot be made, the request gets 503, never the metrics.
//
// Provider returns the filter for controller-runtime's metrics server
// (metricsserver.Options.FilterProvider). It is written over the typed
// review APIs of client-go, so an operator that uses it links none of
// k8s.io/apiserver. The operator needs
//
//	authentication.k8s.io tokenreviews: create
//	authorization.k8s.io subjectaccessreviews: create
package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options tune the filter; the zero value takes the defaults.
type Options struct {
	// AllowFor is how long an allowed token and path stay allowed without
	// a new review (1 minute): a grant withdrawn, or a token revoked, ends
	// within that time.
	AllowFor time.Duration
	// DenyFor is how long a refused token and path stay refused without a
	// new review (10 seconds).
	DenyFor time.Duration
	// MaxDecisions bounds the decisions kept (1024); when it is reached,
	// expired ones go first, then arbitrary ones.
	MaxDecisions int
	// MaxConcurrentReviews bounds the reviews in flight at once (4); a
	// request waits for its turn as long as its own context lasts.
	MaxConcurrentReviews int
	// ReviewQPS and ReviewBurst limit the review calls to the API server
	// (5 and 10), apart from the operator's own client, so that a flood of
	// requests with made-up tokens costs the API server little and the
	// operator's own calls nothing.
	ReviewQPS   float32
	ReviewBurst int
	// ReviewTimeout bounds each review call (10 seconds).
	ReviewTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.AllowFor <= 0 {
		o.AllowFor = time.Minute
	}
	if o.DenyFor <= 0 {
		o.DenyFor = 10 * time.Second
	}
	if o.MaxDecisions <= 0 {
		o.MaxDecisions = 1024
	}
	if o.MaxConcurrentReviews <= 0 {
		o.MaxConcurrentReviews = 4
	}
	if o.ReviewQPS <= 0 {
		o.ReviewQPS = 5
	}
	if o.ReviewBurst <= 0 {
		o.ReviewBurst = 10
	}
	if o.ReviewTimeout <= 0 {
		o.ReviewTimeout = 10 * time.Second
	}
	return o
}

// Provider returns a metricsserver.Options.FilterProvider that guards the
// metrics server with o.
func Provider(o Options) func(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	return func(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
		g, err := newGuard(cfg, httpClient, o)
		if err != nil {
			return nil, err
		}
		return g.filter, nil
	}
}

// guard reviews the requests to the metrics server and keeps its decisions
// for a while.
type guard struct {
	tokens  authnclient.TokenReviewInterface
	access  authzclient.SubjectAccessReviewInterface
	opts    Options
	turns   chan struct{}
	now     func() time.Time
	mu      sync.Mutex
	decided map[[sha256.Size]byte]decision
}

// decision is the answer to one token, verb and path until expires.
type decision struct {
	status  int
	expires time.Time
}

func newGuard(cfg *rest.Config, httpClient *http.Client, o Options) (*guard, error) {
	o = o.withDefaults()
	rc := rest.CopyConfig(cfg)
	rc.QPS, rc.Burst, rc.RateLimiter = o.ReviewQPS, o.ReviewBurst, nil
	authn, err := authnclient.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return nil, fmt.Errorf("token review client: %w", err)
	}
	authz, err := authzclient.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return nil, fmt.Errorf("access review client: %w", err)
	}
	return &guard{
		tokens:  authn.TokenReviews(),
		access:  authz.SubjectAccessReviews(),
		opts:    o,
		turns:   make(chan struct{}, o.MaxConcurrentReviews),
		now:     time.Now,
		decided: make(map[[sha256.Size]byte]decision),
	}, nil
}

// filter is the metricsserver.Filter: it lets a request through to next
// only when its token's user may get its path.
func (g *guard) filter(log logr.Logger, next http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "Unauthorized: send a bearer token of a user the API server knows", http.StatusUnauthorized)
			return
		}
		verb, path := strings.ToLower(r.Method), r.URL.Path
		status, err := g.decide(r.Context(), token, verb, path)
		if err != nil {
			log.Error(err, "Could not review a request to the metrics server")
			http.Error(w, "Service Unavailable: the request could not be reviewed", http.StatusServiceUnavailable)
			return
		}
		switch status {
		case http.StatusOK:
			next.ServeHTTP(w, r)
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "Unauthorized: the API server does not accept this token", status)
		default:
			http.Error(w, fmt.Sprintf("Forbidden: the token's user may not %s %s", verb, path), status)
		}
	}), nil
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header (the scheme in any case), and false when there is none.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, found := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// decide returns the HTTP status the request gets: 200, 401 or 403, from a
// decision kept or from new reviews; an error when a review failed.
func (g *guard) decide(ctx context.Context, token, verb, path string) (int, error) {
	key := sha256.Sum256([]byte(verb + "\x00" + path + "\x00" + token))
	if status, ok := g.kept(key); ok {
		return status, nil
	}
	select {
	case g.turns <- struct{}{}:
		defer func() { <-g.turns }()
	case <-ctx.Done():
		return 0, fmt.Errorf("wait for a review: %w", ctx.Err())
	}
	// Another request with the same token may have decided while this one
	// waited for its turn.
	if status, ok := g.kept(key); ok {
		return status, nil
	}
	status, err := g.review(ctx, token, verb, path)
	if err != nil {
		return 0, err
	}
	g.keep(key, status)
	return status, nil
}

// review asks the API server who the token belongs to and whether that
// user may verb path.
func (g *guard) review(ctx context.Context, token, verb, path string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.ReviewTimeout)
	defer cancel()
	tr, err := g.tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, nil
	}
	user := tr.Status.User
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := g.access.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("subject access review of %s: %w", user.Username, err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		return http.StatusForbidden, nil
	}
	return http.StatusOK, nil
}

// kept returns a decision that has not expired.
func (g *guard) kept(key [sha256.Size]byte) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.decided[key]
	if !ok || !g.now().Before(d.expires) {
		return 0, false
	}
	return d.status, true
}

// keep records a decision for AllowFor or DenyFor, making room first when
// MaxDecisions are kept.
func (g *guard) keep(key [sha256.Size]byte, status int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	ttl := g.opts.DenyFor
	if status == http.StatusOK {
		ttl = g.opts.AllowFor
	}
	g.makeRoom(now)
	g.decided[key] = decision{status: status, expires: now.Add(ttl)}
}

// makeRoom removes decisions until fewer than MaxDecisions are kept.
func (g *guard) makeRoom(now time.Time) {
	if len(g.decided) >= g.opts.MaxDecisions {
		// Expired decisions go first, then refusals (a flood of made-up
		// tokens pushes out other made-up tokens, not a reader's grant),
		// then any.
		for _, evict := range []func(decision) bool{
			func(d decision) bool { return !now.Before(d.expires) },
			func(d decision) bool { return d.status != http.StatusOK },
			func(decision) bool { return true },
		} {
			for k, d := range g.decided {
				if len(g.decided) < g.opts.MaxDecisions {
					return
				}
				if evict(d) {
					delete(g.decided, k)
				}
			}
		}
	}
}
