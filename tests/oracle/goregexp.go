// Records what Go's regexp package does for a corpus of cases, as test data for the agent's
// Go-regexp layer (agent/rules/gotemplate_regex.py). Run by tests/oracle/make_regexp_corpus.py;
// reads [{"pattern", "inputs", "repl"}] as JSON on stdin, writes the results as JSON on stdout.
// Offsets are converted from Go's byte offsets to code-point offsets (what Python strings use).
package main

import (
	"encoding/json"
	"os"
	"regexp"
	"unicode/utf8"
)

type Case struct {
	Pattern string   `json:"pattern"`
	Inputs  []string `json:"inputs"`
	Repl    string   `json:"repl"`
}

type Outcome struct {
	Input      string   `json:"input"`
	Match      bool     `json:"match"`
	Submatch   []int    `json:"submatch"`    // FindStringSubmatchIndex, code points; -1 = no group
	All        [][]int  `json:"all"`         // FindAllStringIndex(-1)
	Replace    string   `json:"replace"`     // ReplaceAllString(input, repl)
	Literal    string   `json:"literal"`     // ReplaceAllLiteralString(input, repl)
	Split      []string `json:"split"`       // Split(input, -1)
	Split2     []string `json:"split2"`      // Split(input, 2)
}

type Result struct {
	Pattern  string    `json:"pattern"`
	Repl     string    `json:"repl"`
	Error    string    `json:"error,omitempty"`
	Groups   int       `json:"groups"`
	Names    []string  `json:"names"`
	Outcomes []Outcome `json:"outcomes"`
}

func runes(s string, offsets []int) []int {
	if offsets == nil {
		return nil
	}
	out := make([]int, len(offsets))
	for i, o := range offsets {
		if o < 0 {
			out[i] = -1
		} else {
			out[i] = utf8.RuneCountInString(s[:o])
		}
	}
	return out
}

func main() {
	var cases []Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	results := []Result{}
	for _, c := range cases {
		r := Result{Pattern: c.Pattern, Repl: c.Repl, Outcomes: []Outcome{}}
		re, err := regexp.Compile(c.Pattern)
		if err != nil {
			r.Error = err.Error()
			results = append(results, r)
			continue
		}
		r.Groups = re.NumSubexp()
		r.Names = re.SubexpNames()
		for _, in := range c.Inputs {
			o := Outcome{Input: in, Match: re.MatchString(in), Submatch: runes(in, re.FindStringSubmatchIndex(in)),
				All: [][]int{}, Replace: re.ReplaceAllString(in, c.Repl), Literal: re.ReplaceAllLiteralString(in, c.Repl),
				Split: re.Split(in, -1), Split2: re.Split(in, 2)}
			for _, m := range re.FindAllStringIndex(in, -1) {
				o.All = append(o.All, runes(in, m))
			}
			r.Outcomes = append(r.Outcomes, o)
		}
		results = append(results, r)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(results); err != nil {
		panic(err)
	}
}
