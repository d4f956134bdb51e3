package api

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/fault"
)

// Every pattern the contract declares has words in patternRules: a value
// refused by one is told what was expected, never a regular expression.
func TestEveryPatternOfTheContractHasWords(t *testing.T) {
	doc, err := Contract()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := doc.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	patterns := regexp.MustCompile(`"pattern":("(?:[^"\\]|\\.)*")`).FindAllSubmatch(raw, -1)
	if len(patterns) == 0 {
		t.Fatal("no pattern found in the contract")
	}
	for _, m := range patterns {
		var pattern string
		if err := json.Unmarshal(m[1], &pattern); err != nil {
			t.Fatal(err)
		}
		if _, ok := patternRules[pattern]; !ok {
			t.Errorf("the contract's pattern %q has no words in patternRules", pattern)
		}
	}
}

// A StorageSpec that comes another way than the API (DCM's agent dispatch)
// is held to the contract's rules, refused naming the field under spec.
func TestStorageSpecRulesNameTheField(t *testing.T) {
	check, err := StorageSpecRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ spec, field string }{
		{`{"service_type":"storage","capacity":"1Gi","metadata":{"name":"data"}}`, ""},
		{`{"service_type":"storage","capacity":"1Gi","metadata":{"name":"data"},"provider_hints":{"other":{"x":1},"kubernetes":{"storage_class":"fast"}}}`, ""},
		{`{"service_type":"storage","capacity":"1Gi","metadata":{"name":"data"},"provider_hints":{"kubernetes":{"storageClassName":"fast"}}}`, "spec.provider_hints.kubernetes.storageClassName"},
		{`{"service_type":"storage","capacity":"1Gi","metadata":{"name":"Data"}}`, "spec.metadata.name"},
		{`{"service_type":"storage","capacity":"1K","metadata":{"name":"data"}}`, "spec.capacity"},
		{`{"service_type":"storage","metadata":{"name":"data"}}`, "spec.capacity"},
		{`{"service_type":"storage","capacity":"1Gi","metadata":{"name":"data","namespace":"x"}}`, "spec.metadata.namespace"},
		{`{"service_type":"vm","capacity":"1Gi","metadata":{"name":"data"}}`, "spec.service_type"},
		{`[1]`, "spec"},
		{`nope`, "spec"},
	} {
		err := check(json.RawMessage(tc.spec))
		fe, ok := fault.As(err)
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s refused: %v", tc.spec, err)
		case tc.field != "" && (!ok || fe.Kind != fault.InvalidArgument || fe.Field != tc.field):
			t.Errorf("%s: refused with %v, want the field %s named", tc.spec, err, tc.field)
		}
	}
}
