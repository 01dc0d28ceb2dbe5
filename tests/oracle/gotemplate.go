// Records what Go's text/template does for a corpus of templates, as test data for the agent's
// template engine (agent/gotemplate). Run by tests/oracle/make_template_corpus.py: reads
// [{"template", "data"}] as JSON on stdin, writes [{"template", "data", "output" | "error"}].
// Options as the agent (and NFD) use them: missingkey=error. Only Go's builtin functions:
// Sprig is not in Go's standard library (its cases come from Sprig's own tests instead).
// JSON numbers become int64 when integral, else float64 (as Python's json module does).
package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"text/template"
)

type Case struct {
	Template string      `json:"template"`
	Data     interface{} `json:"data"`
}

type Result struct {
	Template string      `json:"template"`
	Data     interface{} `json:"data"`
	Output   *string     `json:"output,omitempty"`
	Error    string      `json:"error,omitempty"`
}

func convert(v interface{}) interface{} {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]interface{}:
		for k, e := range x {
			x[k] = convert(e)
		}
		return x
	case []interface{}:
		for i, e := range x {
			x[i] = convert(e)
		}
		return x
	}
	return v
}

func main() {
	dec := json.NewDecoder(os.Stdin)
	dec.UseNumber()
	var cases []Case
	if err := dec.Decode(&cases); err != nil {
		panic(err)
	}
	out := []Result{}
	for _, c := range cases {
		r := Result{Template: c.Template, Data: c.Data}
		raw, _ := json.Marshal(c.Data)
		d := json.NewDecoder(strings.NewReader(string(raw)))
		d.UseNumber()
		var data interface{}
		_ = d.Decode(&data)
		t, err := template.New("t").Option("missingkey=error").Parse(c.Template)
		if err == nil {
			var buf bytes.Buffer
			err = t.Execute(&buf, convert(data))
			if err == nil {
				s := buf.String()
				r.Output = &s
			}
		}
		if err != nil {
			r.Error = err.Error()
		}
		out = append(out, r)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
