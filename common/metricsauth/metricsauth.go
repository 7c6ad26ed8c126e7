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
// cannot be made, the request gets 503, and when too many requests wait
// for one, 429: never the metrics.
//
// Provider returns the filter for controller-runtime's metrics server
// (metricsserver.Options.FilterProvider). It is written over the typed
// review APIs of client-go, so an operator that uses it links none of
// k8s.io/apiserver. The operator needs
//
//	authentication.k8s.io tokenreviews: create
//	authorization.k8s.io subjectaccessreviews: create
//
// and reads the API server's service account signing keys
// (/openid/v1/jwks, which the default discovery role lets every service
// account read) to tell a reader's new token from others before its review
// (see Options.MaxConcurrentReviews).
package metricsauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
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
	// MaxConcurrentReviews bounds the reviews in flight at once in each
	// lane (4); a request waits for its turn as long as its own context
	// lasts. The tokens of a reader (a user whose last review allowed it,
	// told by the decision kept for the token or, for a new service
	// account token, by the API server's signature on it) are reviewed in
	// a lane of their own, so that requests with other tokens (made-up
	// ones, a tenant's, a reader's whose grant was withdrawn) never hold
	// up a reader.
	MaxConcurrentReviews int
	// MaxWaitingReviews bounds the requests waiting for a review in each
	// lane (16); one more gets 429 Too Many Requests at once.
	MaxWaitingReviews int
	// ReviewQPS and ReviewBurst limit the review calls to the API server
	// of each lane, TokenReviews and SubjectAccessReviews together (5 and
	// 10), apart from the operator's own client, so that a flood of
	// requests costs the API server little and the operator's own calls
	// nothing.
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
	if o.MaxWaitingReviews <= 0 {
		o.MaxWaitingReviews = 16
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
	// known reviews the tokens of the readers the API server allowed at
	// their last review, unknown the others.
	known, unknown *lane
	issuer         *issuerKeys
	opts           Options
	now            func() time.Time
	mu             sync.Mutex
	decided        map[[sha256.Size]byte]decision
	// readers holds, for each user a review authenticated and each verb
	// and path (readerKey), whether its last review allowed it.
	readers map[string]bool
}

// lane is a way to the API server's reviews: clients sharing one rate
// limit, the turns of the reviews in flight and a count of the requests
// waiting for one.
type lane struct {
	rest    rest.Interface
	tokens  authnclient.TokenReviewInterface
	access  authzclient.SubjectAccessReviewInterface
	turns   chan struct{}
	waiting atomic.Int64
}

// decision is the answer to one token, verb and path until expires, and
// the user the review found the token to be (empty when it was not
// authenticated).
type decision struct {
	status  int
	expires time.Time
	user    string
}

// errBusy is the answer to a request that found its lane's waiting room
// full.
var errBusy = errors.New("too many requests are waiting for a review")

func newGuard(cfg *rest.Config, httpClient *http.Client, o Options) (*guard, error) {
	o = o.withDefaults()
	known, err := newLane(cfg, httpClient, o)
	if err != nil {
		return nil, err
	}
	unknown, err := newLane(cfg, httpClient, o)
	if err != nil {
		return nil, err
	}
	g := &guard{known: known, unknown: unknown, opts: o, now: time.Now,
		decided: make(map[[sha256.Size]byte]decision), readers: make(map[string]bool)}
	g.issuer = &issuerKeys{now: g.now, refetchAfter: time.Minute, fetch: func(ctx context.Context) ([]byte, error) {
		return known.rest.Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	}}
	return g, nil
}

// newLane builds a lane whose TokenReview and SubjectAccessReview clients
// share one token bucket of o.ReviewQPS and o.ReviewBurst.
func newLane(cfg *rest.Config, httpClient *http.Client, o Options) (*lane, error) {
	rc := rest.CopyConfig(cfg)
	rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(o.ReviewQPS, o.ReviewBurst)
	authn, err := authnclient.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return nil, fmt.Errorf("token review client: %w", err)
	}
	authz, err := authzclient.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return nil, fmt.Errorf("access review client: %w", err)
	}
	return &lane{rest: authn.RESTClient(), tokens: authn.TokenReviews(), access: authz.SubjectAccessReviews(),
		turns: make(chan struct{}, o.MaxConcurrentReviews)}, nil
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
		if errors.Is(err, errBusy) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too Many Requests: too many requests are waiting for a review", http.StatusTooManyRequests)
			return
		}
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
// decision kept or from new reviews; an error when a review failed or the
// request's lane has too many waiting (errBusy).
func (g *guard) decide(ctx context.Context, token, verb, path string) (int, error) {
	key := sha256.Sum256([]byte(verb + "\x00" + path + "\x00" + token))
	status, fresh, user := g.kept(key)
	if fresh {
		return status, nil
	}
	l, signed := g.unknown, ""
	if user == "" {
		// A token this guard has not reviewed: a service account token
		// names its user under the API server's signature.
		signed = g.issuer.subject(ctx, token)
		user = signed
	}
	if g.reader(readerKey(user, verb, path)) {
		l = g.known
	}
	if l.waiting.Add(1) > int64(g.opts.MaxWaitingReviews) {
		l.waiting.Add(-1)
		return 0, errBusy
	}
	select {
	case l.turns <- struct{}{}:
		l.waiting.Add(-1)
		defer func() { <-l.turns }()
	case <-ctx.Done():
		l.waiting.Add(-1)
		return 0, fmt.Errorf("wait for a review: %w", ctx.Err())
	}
	// Another request with the same token may have decided while this one
	// waited for its turn.
	if status, fresh, _ := g.kept(key); fresh {
		return status, nil
	}
	status, reviewed, err := l.review(ctx, token, verb, path, g.opts.ReviewTimeout)
	if err != nil {
		return 0, err
	}
	reader := readerKey(reviewed, verb, path)
	if status == http.StatusUnauthorized && signed != "" {
		// A token made for signed, under the API server's signature, that
		// the API server does not accept (made for another audience, or
		// bound to an object since deleted): signed leaves the readers'
		// lane. Only who may have tokens made for it can send one.
		reader = readerKey(signed, verb, path)
	}
	g.keep(key, status, reviewed, reader)
	return status, nil
}

// readerKey names a user's standing for one verb and path in the readers'
// lane; empty for no user.
func readerKey(user, verb, path string) string {
	if user == "" {
		return ""
	}
	return user + "\x00" + verb + "\x00" + path
}

// review asks the API server who the token belongs to and whether that
// user may verb path.
func (l *lane) review(ctx context.Context, token, verb, path string, timeout time.Duration) (status int, username string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr, err := l.tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return 0, "", fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, "", nil
	}
	user := tr.Status.User
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := l.access.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return 0, "", fmt.Errorf("subject access review of %s: %w", user.Username, err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		return http.StatusForbidden, user.Username, nil
	}
	return http.StatusOK, user.Username, nil
}

// kept returns the decision kept for key, whether it has not expired, and
// the user the review found its token to be (expired or not).
func (g *guard) kept(key [sha256.Size]byte) (status int, fresh bool, user string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.decided[key]
	if !ok {
		return 0, false, ""
	}
	return d.status, g.now().Before(d.expires), d.user
}

// reader returns whether the last review of the user, verb and path that
// reader names allowed it.
func (g *guard) reader(reader string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return reader != "" && g.readers[reader]
}

// keep records a decision for AllowFor or DenyFor, making room first when
// MaxDecisions are kept, and whether it allowed the reader it names (a
// user, verb and path; empty for none).
func (g *guard) keep(key [sha256.Size]byte, status int, user, reader string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	ttl := g.opts.DenyFor
	if status == http.StatusOK {
		ttl = g.opts.AllowFor
	}
	if _, known := g.decided[key]; !known {
		// Expired decisions go first, then refusals (a flood of made-up
		// tokens pushes out other made-up tokens, not a reader's grant),
		// then any.
		makeRoom(g.decided, g.opts.MaxDecisions,
			func(d decision) bool { return !now.Before(d.expires) },
			func(d decision) bool { return d.status != http.StatusOK })
	}
	g.decided[key] = decision{status: status, expires: now.Add(ttl), user: user}
	if reader == "" {
		return
	}
	if _, known := g.readers[reader]; !known {
		// Users no longer allowed go first, then any.
		makeRoom(g.readers, g.opts.MaxDecisions, func(allowed bool) bool { return !allowed })
	}
	g.readers[reader] = status == http.StatusOK
}

// makeRoom removes entries of m until fewer than max are left: those first
// that the first of first removes, then the second's, and so on, then any.
func makeRoom[K comparable, V any](m map[K]V, max int, first ...func(V) bool) {
	for _, evict := range append(first, func(V) bool { return true }) {
		for k, v := range m {
			if len(m) < max {
				return
			}
			if evict(v) {
				delete(m, k)
			}
		}
	}
}
