// Command gotemplatevectors records how Go's text/template renders a list of
// cases, so that hookrunner's Python engine can be tested against real Go.
//
// It reads a JSON array of cases from the file named by its first argument and
// writes a JSON document of results to standard output. Each case runs in its
// own scratch directory (holding the case's files), with the case's
// environment variables set, and with the same three extra functions that
// webhook installs for -template: getenv, cat and credential.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"text/template"
)

type testCase struct {
	Name     string            `json:"name"`
	Template string            `json:"template"`
	Env      map[string]string `json:"env,omitempty"`
	Files    map[string]string `json:"files,omitempty"`
	Data     json.RawMessage   `json:"data,omitempty"`
}

type record struct {
	testCase
	Output *string `json:"output,omitempty"`
	Error  *string `json:"error,omitempty"`
	Phase  string  `json:"phase,omitempty"`
}

// These three mirror the functions webhook registers; they are written here
// from the behaviour its documentation describes.
func getenv(name string) string { return os.Getenv(name) }

func cat(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

func credential(name string) string {
	dir := os.Getenv("CREDENTIALS_DIRECTORY")
	if dir == "" {
		return os.Getenv(name)
	}
	return cat(path.Join(dir, name))
}

// decodeData turns JSON into the plain Go values a template would see,
// using int for integral numbers and float64 for the rest.
func decodeData(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return convertNumbers(v), nil
}

func convertNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i)
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = convertNumbers(x[i])
		}
		return x
	case map[string]any:
		for k := range x {
			x[k] = convertNumbers(x[k])
		}
		return x
	}
	return v
}

func run(c testCase, root string) record {
	rec := record{testCase: c}
	dir, err := os.MkdirTemp(root, "case")
	if err != nil {
		panic(err)
	}
	for rel, content := range c.Files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			panic(err)
		}
	}
	if err := os.Chdir(dir); err != nil {
		panic(err)
	}
	for k, v := range c.Env {
		os.Setenv(k, v)
	}
	defer func() {
		for k := range c.Env {
			os.Unsetenv(k)
		}
	}()
	data, err := decodeData(c.Data)
	if err != nil {
		panic(fmt.Sprintf("case %s: bad data: %v", c.Name, err))
	}
	funcs := template.FuncMap{"cat": cat, "credential": credential, "getenv": getenv}
	tmpl, err := template.New("hooks").Funcs(funcs).Parse(c.Template)
	if err != nil {
		msg := err.Error()
		rec.Error, rec.Phase = &msg, "parse"
		return rec
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		msg := err.Error()
		rec.Error, rec.Phase = &msg, "exec"
		return rec
	}
	out := buf.String()
	rec.Output = &out
	return rec
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gotemplatevectors CASES.json > VECTORS.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	var cases []testCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		panic(err)
	}
	root, err := os.MkdirTemp("", "gotemplatevectors")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	records := make([]record, 0, len(cases))
	for _, c := range cases {
		records = append(records, run(c, root))
	}
	doc := map[string]any{"go_version": runtime.Version(), "vectors": records}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(doc); err != nil {
		panic(err)
	}
}
