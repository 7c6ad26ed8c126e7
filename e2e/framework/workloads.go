package framework

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/image"
)

// ProbeImage is the image of e2e/cmd/svid-probe that the clusters run.
const ProbeImage = "localhost/trustplane/svid-probe:e2e"

// probePackage is the probe's Go package.
const probePackage = "github.com/trustplane/trustplane/e2e/cmd/svid-probe"

// Workloads is what a spec needs to run pods that ask SPIRE for their
// identity.
type Workloads struct {
	// ProbeImage is present on every node (imagePullPolicy Never).
	ProbeImage string
	// AgentSocketDir is the node's directory that holds the SPIRE agent's
	// Workload API socket, for a hostPath volume.
	AgentSocketDir string
	// AgentSocketName is the socket's name in AgentSocketDir.
	AgentSocketName string
}

// ErrNoNode is wrapped by Workloads when the cluster runs no pods.
var ErrNoNode = errors.New("this cluster runs no pods")

// BuildProbeImage builds svid-probe as a static binary and writes its image
// (running as 65532:65532) as a tarball into dir, and returns its path.
func BuildProbeImage(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "svid-probe")
	if err := image.GoBinary(ctx, root, probePackage, bin); err != nil {
		return "", err
	}
	tar := filepath.Join(dir, "svid-probe.tar")
	spec := image.Spec{
		Ref:        ProbeImage,
		Files:      []image.File{{Path: "/svid-probe", Source: bin}},
		Entrypoint: []string{"/svid-probe"},
		User:       "65532:65532",
	}
	if err := image.WriteTarball(spec, tar); err != nil {
		return "", err
	}
	return tar, nil
}

// PodLogs returns what the pod's container printed, through the apiserver
// (which asks the pod's kubelet), as `kubectl logs` does.
func PodLogs(ctx context.Context, c Cluster, namespace, pod string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
	if err != nil {
		return "", fmt.Errorf("load kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("clientset: %w", err)
	}
	out, err := cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of %s/%s: %w", namespace, pod, err)
	}
	return string(out), nil
}

// Probe is a Deployment of the svid-probe.
type Probe struct {
	// Namespace and Name of the Deployment; its pods carry app=<Name>
	// unless Labels set app.
	Namespace, Name string
	// ServiceAccount runs the pods; created when missing.
	ServiceAccount string
	// Labels are added to the pods and to the Deployment's selector.
	Labels map[string]string
	// Args are the probe's flags.
	Args []string
	// ConfigMap, when set, is mounted read-only at /run/trust (a trust
	// bundle for --bundle).
	ConfigMap string
}

// DeployProbe runs the svid-probe as a Deployment, with the agent's
// Workload API socket mounted read-only.
func DeployProbe(ctx context.Context, c Cluster, w Workloads, p Probe) error {
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.ServiceAccount}}
	if err := c.Client().Create(ctx, account); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account %s/%s: %w", p.Namespace, p.ServiceAccount, err)
	}
	labels := map[string]string{"app": p.Name}
	for k, v := range p.Labels {
		labels[k] = v
	}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            p.ServiceAccount,
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					Containers: []corev1.Container{{
						Name: "probe", Image: w.ProbeImage, ImagePullPolicy: corev1.PullNever, Args: p.Args,
						Env:          []corev1.EnvVar{{Name: "SPIFFE_ENDPOINT_SOCKET", Value: "unix:///run/spire/sockets/" + w.AgentSocketName}},
						VolumeMounts: []corev1.VolumeMount{{Name: "agent", MountPath: "/run/spire/sockets", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "agent", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: w.AgentSocketDir, Type: ptr.To(corev1.HostPathDirectory)},
					}}},
				},
			},
		},
	}
	if p.ConfigMap != "" {
		spec := &deploy.Spec.Template.Spec
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "trust", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: p.ConfigMap}},
		}})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "trust", MountPath: "/run/trust", ReadOnly: true})
	}
	if err := c.Client().Create(ctx, deploy); err != nil {
		return fmt.Errorf("create probe deployment %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// ProbePod returns a running pod of the probe Deployment namespace/name: a
// pod owned by one of its ReplicaSets (named <Deployment>-<template hash>),
// whatever labels other Deployments share.
func ProbePod(ctx context.Context, c Cluster, namespace, name string) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.Client().List(ctx, pods, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	for i, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && ownedByDeployment(&p, name) {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no running pod of %s/%s yet", namespace, name)
}

// ProbeLog returns the log of a running pod of the probe Deployment
// namespace/name (ProbePod).
func ProbeLog(ctx context.Context, c Cluster, namespace, name string) (string, error) {
	pod, err := ProbePod(ctx, c, namespace, name)
	if err != nil {
		return "", err
	}
	return PodLogs(ctx, c, namespace, pod.Name)
}

var x509Line = regexp.MustCompile(`(?m)^x509-svid id=(\S+) dns=(\S*) `)

// X509SVIDs lists the X509-SVIDs a probe's log reports, as "<SPIFFE ID>
// dns=<names>".
func X509SVIDs(log string) []string {
	var out []string
	for _, m := range x509Line.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1]+" dns="+m[2])
	}
	return out
}

func ownedByDeployment(pod *corev1.Pod, deployment string) bool {
	for _, ref := range pod.OwnerReferences {
		if i := strings.LastIndex(ref.Name, "-"); ref.Kind == "ReplicaSet" && i > 0 && ref.Name[:i] == deployment {
			return true
		}
	}
	return false
}
