package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiCall names a kind of API server request: verb, resource and
// subresource, as the API server's apiserver_request_duration_seconds
// labels them.
type apiCall struct{ verb, resource, subresource string }

func (c apiCall) String() string {
	s := c.verb + " " + c.resource
	if c.subresource != "" {
		s += "/" + c.subresource
	}
	return s
}

// apiTimes are the API server's request durations, summed, and request
// counts by kind of request.
type apiTimes map[apiCall][2]float64

// apiServerTimes scrapes the API server's own request durations (the time
// it took to serve each request, from its /metrics).
func apiServerTimes(ctx context.Context, cfg *rest.Config) (apiTimes, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("api server metrics: %w", err)
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("api server metrics: %w", err)
	}
	t := apiTimes{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		var slot int
		switch {
		case strings.HasPrefix(line, "apiserver_request_duration_seconds_sum{"):
			slot = 0
		case strings.HasPrefix(line, "apiserver_request_duration_seconds_count{"):
			slot = 1
		default:
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		labels := line[strings.IndexByte(line, '{')+1 : end]
		c := apiCall{verb: label(labels, "verb"), resource: label(labels, "resource"), subresource: label(labels, "subresource")}
		sums := t[c]
		sums[slot] += v
		t[c] = sums
	}
	return t, sc.Err()
}

// label returns the value of label name in a Prometheus label list (the
// API server's label values hold no commas).
func label(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		if v, ok := strings.CutPrefix(kv, name+`="`); ok {
			return strings.TrimSuffix(v, `"`)
		}
	}
	return ""
}

// since returns the stretch from t0 to t.
func (t apiTimes) since(t0 apiTimes) apiTimes {
	d := apiTimes{}
	for c, v := range t {
		w := t0[c]
		if n := v[1] - w[1]; n > 0 {
			d[c] = [2]float64{v[0] - w[0], n}
		}
	}
	return d
}

// means prints the mean time and count of each of calls in the stretch.
func (t apiTimes) means(calls ...apiCall) string {
	var parts []string
	for _, c := range calls {
		v := t[c]
		if v[1] == 0 {
			parts = append(parts, c.String()+" none")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s mean %s over %.0f", c, seconds(v[0]/v[1]).Round(10*time.Microsecond), v[1]))
	}
	return strings.Join(parts, ", ")
}

// apiServerProfile starts a CPU profile of the API server for seconds
// when BENCH_PPROF is set (saved as /tmp/kube-apiserver-cpu-<name>.pb.gz)
// and returns the function that waits for it; otherwise both do nothing.
func apiServerProfile(ctx context.Context, b interface{ Logf(string, ...any) }, cfg *rest.Config, name string) (wait func()) {
	if os.Getenv("BENCH_PPROF") == "" {
		return func() {}
	}
	secs := os.Getenv("BENCH_CPU_SECONDS")
	if secs == "" {
		secs = "20"
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			b.Logf("api server profile: %v", err)
			return
		}
		raw, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", secs).DoRaw(ctx)
		if err != nil {
			b.Logf("api server profile: %v", err)
			return
		}
		if err := os.WriteFile(fmt.Sprintf("/tmp/kube-apiserver-cpu-%s.pb.gz", name), raw, 0o644); err != nil {
			b.Logf("api server profile: %v", err)
		}
	}()
	return func() { <-done }
}
