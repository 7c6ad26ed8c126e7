package target

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
)

// The kinds whose caBundle fields are injected.
var (
	// ValidatingWebhookConfigurationGVK gets webhooks[].clientConfig.caBundle.
	ValidatingWebhookConfigurationGVK = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"}
	// MutatingWebhookConfigurationGVK gets webhooks[].clientConfig.caBundle.
	MutatingWebhookConfigurationGVK = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"}
	// APIServiceGVK gets spec.caBundle.
	APIServiceGVK = schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"}
	// CustomResourceDefinitionGVK gets spec.conversion.webhook.clientConfig.caBundle.
	CustomResourceDefinitionGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
)

// InjectionKinds lists the kinds Injector handles, for watches and caches.
func InjectionKinds() []schema.GroupVersionKind {
	return []schema.GroupVersionKind{ValidatingWebhookConfigurationGVK, MutatingWebhookConfigurationGVK, APIServiceGVK, CustomResourceDefinitionGVK}
}

// Injector writes a PEM bundle into the caBundle fields of annotated objects.
type Injector struct {
	// Cache lists PartialObjectMetadata of the injection kinds (metadata
	// only: CRDs carry large schemas we never need).
	Cache client.Reader
	// Live reads the full objects to compare their caBundle.
	Live client.Reader
	// Client applies.
	Client client.Client
}

// Sync injects caBundle into every object annotated for bundle. An object
// that already holds it is not written.
func (in *Injector) Sync(ctx context.Context, bundle string, caBundle []byte) Report {
	return in.each(ctx, bundle, caBundle, false)
}

// Fill injects caBundle only into the annotated objects that hold no
// caBundle yet: every caBundle field is empty, or already holds caBundle (a
// webhook added to a configuration whose other webhooks hold it). An object
// holding any other caBundle is not written. It runs while the sources fail,
// with caBundle the last good bundle.
func (in *Injector) Fill(ctx context.Context, bundle string, caBundle []byte) Report {
	return in.each(ctx, bundle, caBundle, true)
}

func (in *Injector) each(ctx context.Context, bundle string, caBundle []byte, fillOnly bool) Report {
	var rep Report
	want := base64.StdEncoding.EncodeToString(caBundle)
	for _, gvk := range InjectionKinds() {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := in.Cache.List(ctx, l); err != nil {
			rep.Fail("list "+gvk.Kind, err)
			continue
		}
		for _, m := range l.Items {
			if m.Annotations[v1alpha1.InjectAnnotation] != bundle || m.DeletionTimestamp != nil {
				continue
			}
			rep.Add(in.syncOne(ctx, gvk, m.Name, want, fillOnly))
		}
	}
	return rep
}

func (in *Injector) syncOne(ctx context.Context, gvk schema.GroupVersionKind, name, want string, fillOnly bool) Report {
	var rep Report
	what := fmt.Sprintf("%s %s", gvk.Kind, name)
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(gvk)
	if err := in.Live.Get(ctx, client.ObjectKey{Name: name}, live); err != nil {
		if client.IgnoreNotFound(err) != nil {
			rep.Fail(what, err)
		}
		return rep
	}
	patch, current, err := injection(gvk, live, want)
	if errors.Is(err, errNoCABundleField) {
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %v", what, err))
		return rep
	}
	if err != nil {
		rep.Fail(what, err)
		return rep
	}
	if holdsOnly(current, want) {
		rep.InSync++
		return rep
	}
	if fillOnly && !holdsOnly(current, "", want) {
		return rep // an existing target: not changed while the sources fail
	}
	if err := in.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(patch),
		client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		rep.Fail(what, err)
		return rep
	}
	rep.InSync++
	rep.Written++
	return rep
}

// holdsOnly reports whether every value of current is one of allowed.
func holdsOnly(current []string, allowed ...string) bool {
	for _, c := range current {
		if !slices.Contains(allowed, c) {
			return false
		}
	}
	return true
}

// errNoCABundleField: an annotated object has no caBundle field to set.
var errNoCABundleField = errors.New("nothing to inject into")

// injection returns the apply object that sets want into live's caBundle
// fields, and the values these fields hold now ("" for an unset one).
func injection(gvk schema.GroupVersionKind, live *unstructured.Unstructured, want string) (*unstructured.Unstructured, []string, error) {
	patch := &unstructured.Unstructured{Object: map[string]any{}}
	patch.SetGroupVersionKind(gvk)
	patch.SetName(live.GetName())
	var current []string
	check := func(obj map[string]any, path ...string) {
		got, _, _ := unstructured.NestedString(obj, path...)
		current = append(current, got)
	}
	switch gvk {
	case ValidatingWebhookConfigurationGVK, MutatingWebhookConfigurationGVK:
		webhooks, _, err := unstructured.NestedSlice(live.Object, "webhooks")
		if err != nil {
			return nil, nil, fmt.Errorf("read webhooks: %w", err)
		}
		if len(webhooks) == 0 {
			return nil, nil, fmt.Errorf("%w: no webhooks", errNoCABundleField)
		}
		var items []any
		for _, w := range webhooks {
			wm, ok := w.(map[string]any)
			if !ok {
				return nil, nil, fmt.Errorf("webhook is %T, not an object", w)
			}
			check(wm, "clientConfig", "caBundle")
			items = append(items, map[string]any{
				"name":         wm["name"],
				"clientConfig": map[string]any{"caBundle": want},
			})
		}
		patch.Object["webhooks"] = items
	case APIServiceGVK:
		check(live.Object, "spec", "caBundle")
		patch.Object["spec"] = map[string]any{"caBundle": want}
	case CustomResourceDefinitionGVK:
		strategy, _, _ := unstructured.NestedString(live.Object, "spec", "conversion", "strategy")
		if strategy != "Webhook" {
			return nil, nil, fmt.Errorf("%w: conversion strategy is %q, not Webhook", errNoCABundleField, strategy)
		}
		check(live.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		patch.Object["spec"] = map[string]any{"conversion": map[string]any{
			"webhook": map[string]any{"clientConfig": map[string]any{"caBundle": want}},
		}}
	default:
		return nil, nil, fmt.Errorf("kind %s cannot be injected", gvk.Kind)
	}
	return patch, current, nil
}
