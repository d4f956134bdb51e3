package api

import (
	"encoding/json"
	"regexp"
	"testing"
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
