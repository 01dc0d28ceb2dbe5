// Recorder: what evanphx/json-patch (the library kube-apiserver applies JSON patch and JSON
// merge patch with) does for each case read from stdin. Input: a JSON list of
// {"kind": "json"|"merge", "doc": <raw JSON>, "patch": <raw JSON>}. Output: a JSON list of
// {"ok": true, "result": <JSON>} or {"ok": false, "stage": "decode"|"apply", "error": "<text>"}.
// Built in GOPATH mode against Debian's golang-github-evanphx-json-patch-dev (see
// make_patch_corpus.py); no network, no module proxy.
package main

import (
	"encoding/json"
	"os"

	jsonpatch "github.com/evanphx/json-patch"
)

type input struct {
	Kind  string          `json:"kind"`
	Doc   json.RawMessage `json:"doc"`
	Patch json.RawMessage `json:"patch"`
}

type output struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Stage  string          `json:"stage,omitempty"`
	Error  string          `json:"error,omitempty"`
}

func main() {
	var cases []input
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	out := make([]output, 0, len(cases))
	for _, c := range cases {
		out = append(out, run(c))
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}

func run(c input) (o output) {
	defer func() {
		if r := recover(); r != nil {
			o = output{OK: false, Stage: "panic", Error: "panic"}
		}
	}()
	if c.Kind == "merge" {
		res, err := jsonpatch.MergePatch(c.Doc, c.Patch)
		if err != nil {
			return output{OK: false, Stage: "apply", Error: err.Error()}
		}
		return output{OK: true, Result: res}
	}
	patch, err := jsonpatch.DecodePatch(c.Patch)
	if err != nil {
		return output{OK: false, Stage: "decode", Error: err.Error()}
	}
	res, err := patch.Apply(c.Doc)
	if err != nil {
		return output{OK: false, Stage: "apply", Error: err.Error()}
	}
	if !json.Valid(res) {
		return output{OK: false, Stage: "apply", Error: "invalid JSON result"}
	}
	return output{OK: true, Result: res}
}
