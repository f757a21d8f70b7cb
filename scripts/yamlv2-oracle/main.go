// Command yamlv2-oracle prints, for each hooks-file text it is given, what webhook's decoder makes of it:
// ghodss/yaml (over gopkg.in/yaml.v2) turning YAML into JSON, exactly as webhook's Hooks.LoadFromFile does
// before encoding/json fills its structs.
//
// Input on stdin: a JSON array of base64 strings, the files' bytes (encoding/json decodes them into
// [][]byte). Output on stdout: a JSON array, one object per input: {"json": "<the JSON text>"} or
// {"error": "<message>"}.
//
// Built offline against Debian's Go source tree:
//   GOPATH=/usr/share/gocode GO111MODULE=off go build -o /tmp/yamlv2-oracle ./scripts/yamlv2-oracle
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/ghodss/yaml"
)

type result struct {
	JSON  *string `json:"json,omitempty"`
	Error *string `json:"error,omitempty"`
}

func main() {
	var inputs [][]byte
	if err := json.NewDecoder(os.Stdin).Decode(&inputs); err != nil {
		fmt.Fprintln(os.Stderr, "yamlv2-oracle:", err)
		os.Exit(2)
	}
	results := make([]result, len(inputs))
	for i, data := range inputs {
		out, err := yaml.YAMLToJSON(data)
		if err != nil {
			msg := err.Error()
			results[i].Error = &msg
			continue
		}
		text := string(out)
		results[i].JSON = &text
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, "yamlv2-oracle:", err)
		os.Exit(2)
	}
}
