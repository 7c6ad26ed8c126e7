package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Forward is a port of a pod reached from 127.0.0.1 through the API server.
type Forward struct {
	// Address is the local host:port that reaches the pod's port.
	Address string

	stop context.CancelFunc
	// done is closed when the forward has ended, with its error in err.
	done chan struct{}
	err  error
}

// PortForward forwards a free port on 127.0.0.1 to port of pod
// namespace/name through the API server's pods/portforward subresource
// over SPDY, as `kubectl port-forward` does. It returns once the local port
// listens; ctx bounds only that wait. Stop ends the forward.
func PortForward(ctx context.Context, cfg *rest.Config, namespace, name string, port int) (*Forward, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("spdy transport: %w", err)
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)

	fctx, stop := context.WithCancel(context.Background())
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddressesWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, ready, io.Discard, io.Discard)
	if err != nil {
		stop()
		return nil, fmt.Errorf("port-forward to %s/%s:%d: %w", namespace, name, port, err)
	}
	f := &Forward{stop: stop, done: make(chan struct{})}
	go func() {
		f.err = fw.ForwardPorts()
		close(f.done)
	}()
	select {
	case <-ready:
	case <-f.done:
		stop()
		err := f.err
		if err == nil {
			err = errors.New("ended before it listened")
		}
		return nil, fmt.Errorf("port-forward to %s/%s:%d: %w", namespace, name, port, err)
	case <-ctx.Done():
		stop()
		<-f.done
		return nil, fmt.Errorf("port-forward to %s/%s:%d: %w", namespace, name, port, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		f.Stop()
		return nil, fmt.Errorf("port-forward to %s/%s:%d: local port: %v", namespace, name, port, err)
	}
	f.Address = "127.0.0.1:" + strconv.Itoa(int(ports[0].Local))
	return f, nil
}

// Stop ends the forward and waits until its listener is closed; it may be
// called more than once.
func (f *Forward) Stop() {
	if f == nil {
		return
	}
	f.stop()
	<-f.done
}
