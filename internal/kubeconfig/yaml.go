package kubeconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// yamlLine extracts the line number from a yaml.v3 syntax error. Only the
// number is kept: the rest of such messages may quote the offending input.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+):`)

// decodeYAML parses data as exactly one YAML document and returns its root.
// Decoding into a yaml.Node keeps aliases unexpanded, so an alias bomb costs
// no more than its size before checkNode rejects it.
func decodeYAML(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fieldErr("", "empty document")
		}
		return nil, syntaxError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fieldErr("", "more than one YAML document")
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, fieldErr("", "empty document")
	}
	return root, nil
}

// syntaxError replaces a yaml.v3 error with a generic message that keeps at
// most the line number.
func syntaxError(err error) error {
	reason := "not valid YAML"
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		reason += " (line " + m[1] + ")"
	}
	return fieldErr("", reason)
}

// checkNode rejects the YAML features that let one document mean different
// things to different readers, or cost far more to read than its size:
// anchors, aliases, merge keys, explicit tags and duplicate keys.
func checkNode(n *yaml.Node, path string) error {
	switch {
	case n.Kind == yaml.AliasNode:
		return fieldErr(path, "YAML aliases are not accepted")
	case n.Anchor != "":
		return fieldErr(path, "YAML anchors are not accepted")
	case n.Style&yaml.TaggedStyle != 0:
		return fieldErr(path, "YAML tags are not accepted")
	case n.Kind == yaml.MappingNode:
		return checkMapping(n, path)
	}
	for i, child := range n.Content {
		if err := checkNode(child, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}

// checkMapping applies checkNode to a mapping's keys and values and rejects
// non-string keys, merge keys and duplicate keys.
func checkMapping(n *yaml.Node, path string) error {
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		field := join(path, key.Value)
		if err := checkNode(key, field); err != nil {
			return err
		}
		switch {
		case key.Kind != yaml.ScalarNode:
			return fieldErr(path, "mapping keys must be strings")
		case key.Value == "<<":
			return fieldErr(field, "YAML merge keys are not accepted")
		case seen[key.Value]:
			return fieldErr(field, "duplicate key")
		}
		seen[key.Value] = true
		if err := checkNode(value, field); err != nil {
			return err
		}
	}
	return nil
}
