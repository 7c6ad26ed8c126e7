// Package scoped decides which environment an object belongs to
// (EnvironmentOf) and provides a client.Client confined to one environment:
// every object it writes carries the environment label, and Get, List and
// Delete see only objects of that environment. Objects of other environments
// look as if they did not exist, so one environment's reconcile can never
// read or delete another's, and CreateOrUpdate never adopts one. Writes of
// an object named by key (Update, Patch, Apply, status) are not checked
// against its environment: handlers write children through the janitor
// (package janitor), which checks each one first.
package scoped

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trustplane/trustplane/common/labels"
)

// Client is a client.Client confined to one environment.
type Client struct {
	client.Client
	env string
	// any disables the environment filter (see AnyEnvironment).
	any bool
	// unlabelled counts objects without the label as in scope: this is the
	// default environment (see NewDefault).
	unlabelled bool
}

var _ client.Client = &Client{}

// EnvironmentOf is the one rule for an object's environment: the value of its
// trustplane.dev/environment label, or defaultEnv (the operator's configured
// default environment, "" for none) when the label is missing or empty. An
// empty value names no environment, so it means the same as no label. ok is
// false when neither the label nor defaultEnv names an environment.
func EnvironmentOf(obj client.Object, defaultEnv string) (env string, ok bool) {
	if env := obj.GetLabels()[labels.Environment]; env != "" {
		return env, true
	}
	return defaultEnv, defaultEnv != ""
}

// For returns the Client of environment env in an operator whose default
// environment is defaultEnv: NewDefault when env is the default, else New.
func For(c client.Client, env, defaultEnv string) *Client {
	if env == defaultEnv {
		return NewDefault(c, env)
	}
	return New(c, env)
}

// New returns a Client for environment env (not empty) on top of c.
func New(c client.Client, env string) *Client {
	return &Client{Client: c, env: env}
}

// NewDefault returns a Client for the configured default environment env:
// objects without the environment label (or with an empty one) belong to it
// too, so it sees them beside those labelled env. Objects it writes get the
// label.
func NewDefault(c client.Client, env string) *Client {
	return &Client{Client: c, env: env, unlabelled: true}
}

// AnyEnvironment returns a Client that reads objects of every environment.
// The Controller uses it only on the deletion path of an object whose
// environment label was removed, where the owner's UID alone identifies its
// children, so that deletion can never get stuck.
func AnyEnvironment(c client.Client) *Client {
	return &Client{Client: c, any: true}
}

// Environment returns the environment this client is confined to.
func (c *Client) Environment() string { return c.env }

// InScope reports whether obj belongs to this client's environment, by
// EnvironmentOf.
func (c *Client) InScope(obj client.Object) bool {
	if c.any {
		return true
	}
	defaultEnv := ""
	if c.unlabelled {
		defaultEnv = c.env
	}
	env, ok := EnvironmentOf(obj, defaultEnv)
	return ok && env == c.env
}

// Label puts the environment label on obj.
func (c *Client) Label(obj client.Object) {
	if c.any {
		return
	}
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[labels.Environment] = c.env
	obj.SetLabels(l)
}

// Get reads obj and returns NotFound when it belongs to another environment.
// An out-of-scope object leaves obj as it was, so a following Create of obj
// fails with AlreadyExists instead of carrying the foreign object's fields.
func (c *Client) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	backup := obj.DeepCopyObject()
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if !c.InScope(obj) {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(backup).Elem())
		return c.notFound(obj, key.Name)
	}
	return nil
}

// List lists only objects of this environment, on top of any selector in
// opts (for the default environment: also objects without the label or with
// an empty one).
func (c *Client) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if selectsNothing((&client.ListOptions{}).ApplyOptions(opts)) {
		// Sent as no selector, it would list every environment's objects.
		return meta.SetList(list, nil)
	}
	if c.any {
		return c.Client.List(ctx, list, opts...)
	}
	if !c.unlabelled {
		return c.listWith(ctx, list, selection.Equals, []string{c.env}, opts)
	}
	if err := c.listWith(ctx, list, selection.In, []string{c.env, ""}, opts); err != nil {
		return err
	}
	more, ok := list.DeepCopyObject().(client.ObjectList)
	if !ok {
		return fmt.Errorf("copy %T", list)
	}
	if err := c.listWith(ctx, more, selection.DoesNotExist, nil, opts); err != nil {
		return err
	}
	labelled, err := meta.ExtractList(list)
	if err != nil {
		return fmt.Errorf("extract list: %w", err)
	}
	unlabelled, err := meta.ExtractList(more)
	if err != nil {
		return fmt.Errorf("extract list: %w", err)
	}
	return meta.SetList(list, append(labelled, unlabelled...))
}

// listWith lists with the environment requirement added to the selector of opts.
func (c *Client) listWith(ctx context.Context, list client.ObjectList, op selection.Operator, values []string, opts []client.ListOption) error {
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	req, err := klabels.NewRequirement(labels.Environment, op, values)
	if err != nil {
		return fmt.Errorf("environment selector for %q: %w", c.env, err)
	}
	if lo.LabelSelector == nil {
		lo.LabelSelector = klabels.NewSelector()
	}
	lo.LabelSelector = lo.LabelSelector.Add(*req)
	return c.Client.List(ctx, list, lo)
}

// Create labels obj with the environment and creates it.
func (c *Client) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.Label(obj)
	return c.Client.Create(ctx, obj, opts...)
}

// Update labels obj with the environment and updates it.
func (c *Client) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.Label(obj)
	return c.Client.Update(ctx, obj, opts...)
}

// Patch labels obj with the environment and patches it.
func (c *Client) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.Label(obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// Delete deletes obj only if it belongs to this environment; otherwise it
// returns NotFound. The label is checked on the object as the client reads
// it (a cache may lag), not on obj, and the delete is preconditioned on the
// UID and resourceVersion read: an object replaced or changed since (moved
// to another environment, say) makes the delete conflict instead.
func (c *Client) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	live, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("delete %s: object is not a client.Object", obj.GetName())
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		return err
	}
	uid, rv := live.GetUID(), live.GetResourceVersion()
	opts = append(opts, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	return c.Client.Delete(ctx, live, opts...)
}

// DeleteAllOf deletes only objects of this environment.
func (c *Client) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	if SelectsNothing(opts...) {
		return nil
	}
	if !c.any {
		// For the default environment this leaves objects without the label
		// (or with an empty one) alone: deleting in bulk what no label claims
		// is too broad.
		opts = append(opts, client.MatchingLabels{labels.Environment: c.env})
	}
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

// SelectsNothing reports whether opts hold a label or field selector that
// selects nothing (labels.Nothing(), which metav1.LabelSelectorAsSelector(nil)
// and an empty MatchingLabelsSelector give; fields.Nothing(), which an
// empty MatchingFieldsSelector gives). A DeleteAllOf of such options
// deletes nothing: that selector has no requirements to add others to, and
// is sent as no selector at all, which would select everything.
func SelectsNothing(opts ...client.DeleteAllOfOption) bool {
	return selectsNothing(&(&client.DeleteAllOfOptions{}).ApplyOptions(opts).ListOptions)
}

// selectsNothing is SelectsNothing of resolved list options.
func selectsNothing(lo *client.ListOptions) bool {
	if lo.LabelSelector != nil {
		if _, selectable := lo.LabelSelector.Requirements(); !selectable {
			return true
		}
	}
	// fields.Nothing() is the one field selector neither empty nor made of
	// requirements.
	return lo.FieldSelector != nil && !lo.FieldSelector.Empty() && len(lo.FieldSelector.Requirements()) == 0
}

// CreateOrUpdate fetches obj within the environment, applies mutate, and
// creates or updates it. An object of the same name in another environment
// is never adopted: Create then fails with AlreadyExists.
func (c *Client) CreateOrUpdate(ctx context.Context, obj client.Object, mutate controllerutil.MutateFn) (controllerutil.OperationResult, error) {
	return controllerutil.CreateOrUpdate(ctx, c, obj, func() error {
		if err := mutate(); err != nil {
			return err
		}
		c.Label(obj)
		return nil
	})
}

// Apply server-side applies ac (a typed apply configuration or
// client.ApplyConfigurationFromUnstructured) with the environment label added. Pass
// client.FieldOwner and, for shared objects, client.ForceOwnership.
func (c *Client) Apply(ctx context.Context, ac runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	u, err := ToUnstructured(ac)
	if err != nil {
		return err
	}
	c.Label(u)
	return c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
}

// ToUnstructured returns a copy of ac (a typed apply configuration or
// client.ApplyConfigurationFromUnstructured) as an unstructured object.
func ToUnstructured(ac runtime.ApplyConfiguration) (*unstructured.Unstructured, error) {
	if u, ok := ac.(interface{ UnstructuredContent() map[string]any }); ok {
		return (&unstructured.Unstructured{Object: u.UnstructuredContent()}).DeepCopy(), nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ac)
	if err != nil {
		return nil, fmt.Errorf("convert apply configuration: %w", err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func (c *Client) notFound(obj client.Object, name string) error {
	gr := schema.GroupResource{}
	if gvk, err := apiutil.GVKForObject(obj, c.Scheme()); err == nil {
		gr = schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}
	}
	return apierrors.NewNotFound(gr, name)
}
