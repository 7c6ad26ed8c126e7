package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/trustplane/trustplane/e2e/framework"
)

// showPods runs the svid-probe in a namespace a SpiffeRegistration selects
// and in one it does not, and prints what each pod received.
func showPods(ctx context.Context, l *framework.Local, w framework.Workloads) error {
	fmt.Println("\n=== Pods on the real node ===")
	objects := []string{`
apiVersion: v1
kind: Namespace
metadata: {name: demo-pods, labels: {trustplane.dev/demo-pods: "true"}}`, `
apiVersion: v1
kind: Namespace
metadata: {name: demo-unregistered}`, fmt.Sprintf(`
apiVersion: spiffe.trustplane.dev/v1alpha1
kind: SpiffeRegistration
metadata:
  name: demo-pods
  labels: {trustplane.dev/environment: default}
spec:
  trustDomain: %s
  parentID: %s
  dnsNameTemplates: ["{serviceAccount}.{namespace}.svc"]
  namespaceSelector: {matchLabels: {trustplane.dev/demo-pods: "true"}}`, l.TrustDomain(), l.AgentParentID())}
	for _, y := range objects {
		u, err := framework.FromYAML("%s", y)
		if err != nil {
			return err
		}
		if err := l.Client().Create(ctx, u); err != nil {
			return fmt.Errorf("create %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	for _, ns := range []string{"demo-pods", "demo-unregistered"} {
		if err := framework.DeployProbe(ctx, l, w, framework.Probe{Namespace: ns, Name: "web", ServiceAccount: "web"}); err != nil {
			return err
		}
	}
	fmt.Println("  (each pod runs e2e/cmd/svid-probe, which asks the SPIRE agent's Workload API for its SVIDs)")
	for _, p := range []struct{ ns, want string }{{"demo-pods", "jwt-svid "}, {"demo-unregistered", "no-identity "}} {
		log, err := waitForLog(ctx, l, p.ns, p.want)
		fmt.Printf("  pod of %s/web:\n%s", p.ns, indent(log))
		if err != nil {
			fmt.Println("  ", err)
		}
	}
	return nil
}

// waitForLog waits up to 3 minutes for the probe's log to show want.
func waitForLog(ctx context.Context, l *framework.Local, ns, want string) (string, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		log, err := framework.ProbeLog(ctx, l, ns, "web")
		if err == nil && strings.Contains(log, want) {
			return log, nil
		}
		if time.Now().After(deadline) {
			return log, fmt.Errorf("the pod of %s/web did not print %q within 3 minutes (last error: %v)", ns, strings.TrimSpace(want), err)
		}
		time.Sleep(time.Second) // the demo polls; nothing is asserted here
	}
}
