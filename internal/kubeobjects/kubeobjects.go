// Package kubeobjects reads Kubernetes manifests into objects of any kind
// and finds where each lives in a cluster — for the CLI's bootstrap, which
// applies deploy/target-cluster, and for the tests that dry-run the chart.
package kubeobjects

import (
	"bytes"
	"errors"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Decode reads every object of a multi-document YAML (or JSON) manifest,
// skipping empty documents.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// Client reaches objects of any kind the cluster serves.
type Client struct {
	dynamic dynamic.Interface
	mapper  meta.RESTMapper
}

// NewClient returns a Client for cfg; kinds are looked up in the
// cluster's discovery (cached, refreshed when a kind is not found).
func NewClient(cfg *rest.Config) (*Client, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{dynamic: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Resource is where obj lives: its kind's resource, in its namespace when
// the kind is namespaced (the namespace given when obj names none).
func (c *Client) Resource(obj *unstructured.Unstructured, namespace string) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return c.dynamic.Resource(mapping.Resource), nil
	}
	if ns := obj.GetNamespace(); ns != "" {
		namespace = ns
	}
	return c.dynamic.Resource(mapping.Resource).Namespace(namespace), nil
}
