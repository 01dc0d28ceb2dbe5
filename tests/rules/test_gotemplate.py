"""Go text/template subset used by NodeFeatureRule labelsTemplate/varsTemplate.

Expected outputs are what Go's text/template (missingkey=error) plus Sprig produce for the same
template and data. The data has NFD's template shape: `.<dom>.<feature>` is a list of {Name}
for flags, {Name, Value} for attributes and attribute maps for instances.
"""

from __future__ import annotations

import pytest

from agent.gotemplate import (
    MAX_OUTPUT_CHARS,
    MAX_STEPS,
    MAX_TEMPLATE_BYTES,
    CompiledTemplate,
    TemplateError,
    compile_template,
    parse_key_value_lines,
    render,
    render_key_values,
)

# Two NVIDIA GPUs (Tesla V100 SXM2 1db1, A100 20b0), a Coral USB, Ubuntu 22.04, AVX flags.
NODE = {
    "pci": {
        "device": [
            {"class": "0302", "vendor": "10de", "device": "1db1", "subsystem_vendor": "10de"},
            {"class": "0302", "vendor": "10de", "device": "20b0", "subsystem_vendor": "10de"},
        ]
    },
    "usb": {"device": [{"class": "ff", "vendor": "1a6e", "device": "089a", "serial": ""}]},
    "system": {
        "osrelease": [
            {"Name": "ID", "Value": "ubuntu"},
            {"Name": "VERSION_ID", "Value": "22.04"},
            {"Name": "VERSION_ID.major", "Value": "22"},
        ]
    },
    "cpu": {"cpuid": [{"Name": "AVX"}, {"Name": "AVX2"}, {"Name": "AVX512F"}]},
    "kernel": {"version": [{"Name": "major", "Value": "5"}, {"Name": "minor", "Value": "15"}]},
}


def error_of(template: str, data: object = NODE) -> TemplateError:
    with pytest.raises(TemplateError) as info:
        render(template, data)
    return info.value


# -- NFD documentation examples --------------------------------------------------------------


def test_nfd_instance_range_emits_one_label_line_per_device():
    template = "{{ range .pci.device }}example.com/gpu-{{ .device }}.present=true\n{{ end }}"
    assert render(template, NODE) == (
        "example.com/gpu-1db1.present=true\nexample.com/gpu-20b0.present=true\n"
    )


def test_nfd_attribute_range_picks_one_attribute_by_name():
    template = '{{ range .system.osrelease }}{{ if eq .Name "ID" }}os={{ .Value }}{{ end }}{{ end }}'
    assert render(template, NODE) == "os=ubuntu"


def test_nfd_flag_range_with_trim_markers_builds_clean_lines():
    template = """
{{- range .cpu.cpuid }}
cpu-{{ .Name | lower }}=true
{{- end }}
"""
    assert render(template, NODE) == "\ncpu-avx=true\ncpu-avx2=true\ncpu-avx512f=true\n"


def test_nfd_style_vars_template_with_printf_and_regex():
    template = (
        '{{ range .kernel.version }}{{ if eq .Name "major" }}'
        '{{ printf "kernel-major=%s" .Value }}{{ end }}{{ end }}\n'
        '{{ range .pci.device }}{{ if regexMatch "^03" .class }}'
        'gpu-{{ .vendor }}-{{ .device | upper }}=true\n{{ end }}{{ end }}'
    )
    assert render(template, NODE) == "kernel-major=5\ngpu-10de-1DB1=true\ngpu-10de-20B0=true\n"


def test_render_key_values_parses_output_like_nfd_expandmap():
    template = "{{ range .pci.device }}  gpu-{{ .device }}=present=yes  \n\n{{ end }}vfio=\n"
    assert render_key_values(template, NODE) == {
        "gpu-1db1": "present=yes",  # split at the first "=" only; lines are stripped
        "gpu-20b0": "present=yes",
        "vfio": "",
    }
    assert parse_key_value_lines("a=1\na=2\n") == {"a": "2"}
    with pytest.raises(TemplateError, match="missing value in expanded template output line 2"):
        parse_key_value_lines("a=1\njust-a-key\n")


# -- text, trim markers, comments -------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("plain text only", "plain text only"),
        ("a  {{- 1 -}}  b", "a1b"),
        ("a \n\t{{- 1 }} b", "a1 b"),
        ("a {{ 1 -}} \n b", "a 1b"),
        ("{{-3}}", "-3"),  # "-3" is a number, not a trim marker
        ("{{ 3 }}{{- 4 }}", "34"),
        ("x{{/* a comment */}}y", "xy"),
        ("x {{- /* trimmed comment */ -}} \n y", "xy"),
        ("x{{/* multi\nline */}}y", "xy"),
        ("{{ `raw {{ not an action }}` }}", "raw {{ not an action }}"),
        ('{{ "tab\\tquote\\"nl\\n\\x41\\u00e9\\101" }}', 'tab\tquote"nl\nAéA'),
        ("{{ 'a' }} {{ '\\n' }}", "97 10"),
        ("{{ 0x1F }} {{ 0o17 }} {{ 017 }} {{ 1_000 }} {{ -5 }} {{ +5 }}", "31 15 15 1000 -5 5"),
        ("{{ 1.5 }} {{ 1e6 }} {{ 100000.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ 2.0 }}", "1.5 1e+06 100000 0.0001 1e-05 2"),
        ("{{ true }} {{ false }}", "true false"),
    ],
)
def test_text_literals_trim_and_comments(template, expected):
    assert render(template, {}) == expected


# -- fields and variables ---------------------------------------------------------------------


def test_field_chains_dollar_and_dot():
    data = {"a": {"b": {"c": "deep"}}, "n": 7}
    assert render("{{ .a.b.c }} {{ $.n }} {{ with .a.b }}{{ .c }}{{ $.n }}{{ end }}", data) == "deep 7 deep7"


def test_variable_declaration_assignment_and_scope():
    template = (
        "{{ $x := 1 }}{{ $count := 0 }}"
        "{{ range .cpu.cpuid }}{{ $x = .Name }}{{ $count = add $count 1 }}{{ end }}"
        "{{ $x }} {{ $count }}"
    )
    assert render(template, NODE) == "AVX512F 3"


def test_variable_declared_in_if_is_visible_in_else_and_not_after_end():
    assert render('{{ if $v := "" }}yes{{ else }}empty:{{ len $v }}{{ end }}', {}) == "empty:0"
    error = error_of('{{ if $v := 1 }}{{ end }}{{ $v }}', {})
    assert 'undefined variable "$v"' in str(error)
    assert (error.line, error.column) == (1, 29)


def test_nested_range_with_variables_sees_outer_element():
    data = {"groups": {"b": ["x", "y"], "a": ["z"]}}
    template = "{{ range $g, $items := .groups }}{{ range $i, $e := $items }}{{ $g }}{{ $i }}={{ $e }};{{ end }}{{ end }}"
    assert render(template, data) == "a0=z;b0=x;b1=y;"


def test_field_on_instance_map_and_on_name_value_pairs():
    template = '{{ range .usb.device }}{{ .vendor }}:{{ .device }}{{ end }}|{{ range .kernel.version }}{{ .Name }}={{ .Value }},{{ end }}'
    assert render(template, NODE) == "1a6e:089a|major=5,minor=15,"


# -- range / if / with ------------------------------------------------------------------------


def test_range_over_map_iterates_in_sorted_key_order():
    data = {"m": {"zeta": 1, "alpha": 2, "mid": 3}}
    assert render("{{ range $k, $v := .m }}{{ $k }}={{ $v }} {{ end }}", data) == "alpha=2 mid=3 zeta=1 "
    assert render("{{ range .m }}{{ . }}{{ end }}", data) == "231"


def test_range_else_runs_for_empty_or_nil():
    template = "{{ range .x }}item{{ else }}none{{ end }}"
    assert render(template, {"x": []}) == "none"
    assert render(template, {"x": {}}) == "none"
    assert render(template, {"x": None}) == "none"
    assert render(template, {"x": ["a"]}) == "item"


def test_range_single_variable_gets_element_and_integer_range():
    assert render("{{ range $e := .l }}{{ $e }}{{ end }}", {"l": ["p", "q"]}) == "pq"
    assert render("{{ range 3 }}{{ . }}{{ end }}", {}) == "012"


def test_break_and_continue():
    template = (
        "{{ range .cpu.cpuid }}{{ if eq .Name \"AVX\" }}{{ continue }}{{ end }}"
        "{{ if eq .Name \"AVX512F\" }}{{ break }}{{ end }}{{ .Name }}{{ end }}"
    )
    assert render(template, NODE) == "AVX2"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", "F"), ("x", "T"), (0, "F"), (3, "T"), (None, "F"), ([], "F"), (["a"], "T"),
     ({}, "F"), ({"k": ""}, "T"), (False, "F"), (True, "T"), (0.0, "F")],
)
def test_go_truthiness(value, expected):
    assert render("{{ if .v }}T{{ else }}F{{ end }}", {"v": value}) == expected


def test_if_else_if_chain_and_with_else():
    template = "{{ if eq .n 1 }}one{{ else if eq .n 2 }}two{{ else }}many{{ end }}"
    assert [render(template, {"n": n}) for n in (1, 2, 3)] == ["one", "two", "many"]
    with_template = "{{ with .v }}got {{ . }}{{ else }}dot still {{ .w }}{{ end }}"
    assert render(with_template, {"v": "x", "w": "w"}) == "got x"
    assert render(with_template, {"v": "", "w": "w"}) == "dot still w"
    assert render("{{ with .a }}A{{ else with .b }}B{{ . }}{{ end }}", {"a": 0, "b": 7}) == "B7"


# -- pipelines and builtins -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ('{{ "x" | printf "%s-%s" "a" }}', "a-x"),
        ("{{ .l | len }} {{ len .m }} {{ len \"héllo\" }}", "2 1 6"),  # Go len counts bytes
        ('{{ index .l 1 }} {{ index .m "k" }} {{ index .m "absent" }}|', "b v |"),
        ('{{ (index .l 0) | upper }}', "A"),
        ("{{ and 1 0 2 }} {{ and 1 2 }} {{ or 0 \"\" }} {{ or 0 \"x\" 3 }} {{ not 0 }}", "0 2  x true"),
        ("{{ eq 1 1 }} {{ eq \"a\" \"b\" \"a\" }} {{ ne 1 2 }} {{ lt 1 2 }} {{ le 2 2 }} {{ gt \"b\" \"a\" }} {{ ge 1 2 }}",
         "true true true true true true false"),
        ('{{ eq .nothing "x" }}', "false"),
        ('{{ print 1 2 "a" "b" 3 nil }}', "1 2ab3 <nil>"),
        ('{{ println 1 "a" }}', "1 a\n"),
        ('{{ printf "%s|%d|%v|%q|%5s|%-4d|%05d|%x|%t|%%" "s" 42 true "q\\"" "r" 7 -42 255 false }}',
         's|42|true|"q\\""|    r|7   |-0042|ff|false|%'),
        ('{{ printf "%d %s" "x" 1 }}', "%!d(string=x) %!s(int=1)"),
        ('{{ printf "%s %s" "only" }}', "only %!s(MISSING)"),
        ('{{ printf "%s" "a" "extra" }}', "a%!(EXTRA string=extra)"),
        ('{{ printf "%.2f %v %e" 3.14159 1.5 1234.5 }}', "3.14 1.5 1.234500e+03"),
        ("{{ printf \"%v %v\" .l .m }}", "[a b] map[k:v]"),
        ("{{ slice \"abcdef\" 1 3 }} {{ slice .l 1 }}", "bc [b]"),
        ("{{ .nil }}", "<no value>"),
    ],
)
def test_pipelines_and_go_builtins(template, expected):
    assert render(template, {"l": ["a", "b"], "m": {"k": "v"}, "nil": None, "nothing": None}) == expected


def test_and_or_short_circuit_skips_failing_operands():
    # the right operand would be a missing-key error; Go 1.18+ never evaluates it
    assert render("{{ if or .a .missing }}ok{{ end }}", {"a": 1}) == "ok"
    assert render("{{ if and .b .missing }}no{{ else }}ok{{ end }}", {"b": 0}) == "ok"


# -- Sprig ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ('{{ "MiXed" | lower }} {{ "up" | upper }} {{ "  pad  " | trim }}', "mixed UP pad"),
        ('{{ trimPrefix "pci-" "pci-0300" }} {{ trimSuffix ".present" "x.present" }}', "0300 x"),
        ('{{ "a.b.c" | replace "." "-" }} {{ trimAll "-" "--x--" }}', "a-b-c x"),
        ('{{ contains "de" "10de" }} {{ hasPrefix "10" "10de" }} {{ hasSuffix "x" "10de" }}', "true true false"),
        ('{{ $p := split "." "5.15.0" }}{{ $p._0 }}-{{ $p._1 }}', "5-15"),
        ('{{ splitList "," "a,b,,c" }} {{ splitList "," "a,b" | join "+" }}', "[a b  c] a+b"),
        ('{{ list "c" "a" "b" "a" | sortAlpha }} {{ list "c" "a" "c" 1 1 | uniq }}', "[a a b c] [c a 1]"),
        ('{{ list 1 2 3 | first }} {{ list 1 2 3 | last }} {{ list | first }}', "1 3 <no value>"),
        ('{{ join "," (list "x" 3 true nil) }}', "x,3,true"),
        ('{{ "" | default "dflt" }} {{ "set" | default "dflt" }} {{ default "d" 0 }} {{ default "d" }}', "dflt set d d"),
        ('{{ quote "a\\"b" 1 }} {{ squote "s" }} {{ toString 42 }} {{ cat "a" 1 nil "b" }}', '"a\\"b" "1" \'s\' 42 a 1 b'),
        ('{{ atoi "42" }} {{ atoi "x" }} {{ int "0x10" }} {{ int "010" }} {{ int "12.000" }} {{ int 3.9 }} {{ int "junk" }}',
         "42 0 16 8 12 3 0"),
        ('{{ add 1 "2" 3 }} {{ sub 10 3 }} {{ add1 9 }} {{ mul 2 3 4 }} {{ div -7 2 }} {{ mod -7 2 }} {{ max 1 9 3 }} {{ min 4 2 }}',
         "6 7 10 24 -3 -1 9 2"),
        ('{{ regexMatch "^0[3]" "0302" }} {{ regexMatch "[" "x" }} {{ regexFind "[0-9]+" "ab12cd34" }}', "true false 12"),
        ('{{ regexReplaceAll "([a-z]+)-([0-9]+)" "gpu-1 tpu-22" "${2}_$1" }}', "1_gpu 22_tpu"),
        ('{{ regexReplaceAll "a*" "baaac" "X" }} {{ regexReplaceAllLiteral "(a)" "ab" "$1" }}', "XbXcX $1b"),
        ('{{ regexFindAll "[0-9]" "a1b2c3" -1 }} {{ regexSplit "," "a,b,c" 2 }}', "[1 2 3] [a b,c]"),
        ('{{ regexMatch "^ab$" "ab\\n" }} {{ regexMatch "[[:digit:]]+" "x7" }}', "false true"),
        ('{{ ternary "y" "n" true }} {{ empty "" }} {{ coalesce "" 0 "z" }}', "y true z"),
        ('{{ $d := dict "k" "v" }}{{ get $d "k" }}{{ get $d "nope" }} {{ hasKey $d "k" }} {{ keys (dict "b" 1 "a" 2) }}',
         "v true [a b]"),
        ('{{ has "b" (list "a" "b") }} {{ without (list 1 2 3) 2 }} {{ reverse (list 1 2) }} {{ compact (list "" "x") }}',
         "true [1 3] [2 1] [x]"),
        ('{{ substr 1 3 "abcdef" }} {{ trunc 3 "abcdef" }} {{ repeat 3 "ab" }} {{ title "hello world" }} {{ nospace "a b c" }}',
         "bc abc ababab Hello World abc"),
    ],
)
def test_sprig_functions(template, expected):
    assert render(template, {}) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        # Go's regexp doc examples
        ('{{ regexSplit "a*" "abaabaccadaaae" 5 }}', "[ b b c cadaaae]"),
        ('{{ regexReplaceAll "a(x*)b" "-ab-axxb-" "${1}W" }}', "-W-xxW-"),
        ('{{ regexReplaceAll "a(x*)b" "-ab-axxb-" "$1W" }}', "---"),  # $1W names group "1W"
        ('{{ regexFindAll "a." "paranormal" -1 }} {{ regexFindAll "a." "paranormal" 2 }}', "[ar an al] [ar an]"),
        # leftmost-first (not leftmost-longest) alternation and lazy repeats, as in Go
        ('{{ regexFind "a|ab" "ab" }} {{ regexFind "a(b*?)c?" "abbbc" }} {{ regexFind "(?i)AB+" "xaBbb" }}', "a a aBbb"),
        ('{{ regexMatch "(?m)^b$" "a\\nb\\nc" }} {{ regexMatch "^b$" "a\\nb\\nc" }}', "true false"),
        ('{{ regexMatch `^\\d{2}\\.\\d{2}$` "22.04" }} {{ regexMatch `\\bgpu\\b` "a gpu b" }}', "true true"),
        ('{{ regexReplaceAll `(?P<maj>\\d+)\\.(?P<min>\\d+)` "5.15" "${min}.${maj}$$" }}', "15.5$"),
    ],
)
def test_regex_functions_follow_go_regexp(template, expected):
    assert render(template, {}) == expected


@pytest.mark.parametrize(
    "pattern",
    ["(a+)+$", "(a|aa)+$", "(x*)*y", "(\\\\w+\\\\s?)+$", "^(([a-z])+.)+[A-Z]([a-z])+$"],
)
def test_catastrophic_backtracking_patterns_run_in_linear_time(pattern):
    # each of these takes exponential time on a backtracking engine (Python's re)
    subject = "a" * 5000 + "!"
    template = f'{{{{ regexMatch "{pattern}" .s }}}} {{{{ regexReplaceAll "{pattern}" .s "" | len }}}}'
    matched, length = render(template, {"s": subject}).split()
    assert matched in ("true", "false")
    assert int(length) <= len(subject)


def test_regex_work_shares_the_render_budget():
    huge = {"s": "abcdefgh" * 20_000}
    error = error_of('{{ mustRegexMatch "(a|b|c|d|e|f|g|h){1,50}z" .s }}', huge)
    assert f"exceeded {MAX_STEPS} steps" in error.message
    # cheap calls repeated in a loop run out of the same budget instead of running for minutes
    looped = '{{ range 100000 }}{{ if regexMatch "(x+x+)+y" $.s }}{{ end }}{{ end }}'
    assert f"exceeded {MAX_STEPS} steps" in error_of(looped, {"s": "x" * 200}).message


def test_growing_a_list_in_a_loop_is_charged_by_size():
    template = "{{ $l := list }}{{ range 200000 }}{{ $l = append $l . }}{{ end }}{{ len $l }}"
    assert f"exceeded {MAX_STEPS} steps" in error_of(template, {}).message
    assert render("{{ $l := list }}{{ range 100 }}{{ $l = append $l . }}{{ end }}{{ len ($l | uniq) }}", {}) == "100"


# -- errors with positions --------------------------------------------------------------------


def test_missing_key_is_an_error_naming_key_and_position():
    error = error_of("line one\n  {{ range .pci.device }}{{ .driver }}{{ end }}")
    assert error.message.endswith('map has no entry for key "driver"')
    assert (error.line, error.column) == (2, 29)
    assert "2:29" in str(error)


def test_field_on_non_map_and_on_nil_are_errors():
    assert "can't evaluate field x in type string" in str(error_of("{{ .s.x }}", {"s": "str"}))
    assert "nil pointer evaluating interface {}.x" in str(error_of("{{ .n.x }}", {"n": None}))


@pytest.mark.parametrize(
    ("template", "message", "line", "column"),
    [
        ("abc {{ .a", "unclosed action", 1, 5),
        ("{{ if .a }}x", "unexpected EOF", 1, 1),
        ("ok\n{{ end }}", "unexpected {{end}}", 2, 1),
        ("{{ else }}", "unexpected {{else}}", 1, 1),
        ("x\n  {{ frobnicate .a }}", 'function "frobnicate" not defined', 2, 6),
        ("{{ env \"HOME\" }}", 'function "env" not defined', 1, 4),
        ("{{ expandenv \"$HOME\" }}", 'function "expandenv" not defined', 1, 4),
        ("{{ getHostByName \"x\" }}", 'function "getHostByName" not defined', 1, 4),
        ('{{ "abc }}', "unterminated quoted string", 1, 4),
        ("{{ `abc }}", "unterminated raw quoted string", 1, 4),
        ("{{/* never closed", "unclosed comment", 1, 1),
        ("{{/* c */ x }}", "comment ends before closing delimiter", 1, 8),
        ("{{ (len .a }}", "unclosed left paren", 1, 12),
        ("{{ len .a) }}", "unexpected right paren", 1, 10),
        ("{{ $nope }}", 'undefined variable "$nope"', 1, 4),
        ('{{ "a" | 1 }}', "non executable command in pipeline stage 2", 1, 10),
        ("{{ }}", "missing value for command", 1, 1),
        ("{{ break }}", "{{break}} outside {{range}}", 1, 4),
        ('{{ define "x" }}{{ end }}', "not supported", 1, 4),
        ("{{ 12ab }}", "bad number syntax", 1, 4),
        ("{{ # }}", "unrecognized character", 1, 4),
        ("{{ if 1 }}{{ else }}{{ else }}{{ end }}", "expected {{end}}; found {{else}}", 1, 21),
        ('{{ "a""b" }}', "in operand", 1, 7),
        ('{{ "\\q" }}', "invalid escape", 1, 5),
        ("{{ 99999999999999999999 }}", "overflows int", 1, 4),
    ],
)
def test_parse_errors_name_the_problem_and_position(template, message, line, column):
    error = error_of(template, {"a": "x"})
    assert message in error.message
    assert (error.line, error.column) == (line, column)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ('{{ eq 1 "a" }}', "error calling eq: incompatible types for comparison"),
        ('{{ lt true false }}', "invalid type for comparison"),
        ("{{ index .l 5 }}", "error calling index: index out of range: 5"),
        ('{{ lower 5 }}', "wrong type for value; expected string; got int"),
        ('{{ lower "a" "b" }}', "wrong number of args for lower: want 1 got 2"),
        ("{{ .l 1 }}", "can't give argument to non-function .l"),
        ("{{ nil }}", "nil is not a command"),
        ('{{ range "str" }}{{ end }}', "range can't iterate over str"),
        ("{{ div 1 0 }}", "integer divide by zero"),
        ('{{ first "x" }}', "Cannot find first on type string"),
        ('{{ regexReplaceAll "(" "x" "y" }}', "error parsing regexp"),
        ('{{ mustRegexMatch "(?=x)" "x" }}', "invalid or unsupported Perl syntax"),
        ("{{ len 3 }}", "len of type int"),
    ],
)
def test_execution_errors_are_template_errors(template, message):
    error = error_of(template, {"l": ["a"]})
    assert message in error.message
    assert error.line == 1


# -- safety limits ----------------------------------------------------------------------------


def test_template_over_64_kib_is_rejected_and_64_kib_is_accepted():
    assert len(render("x" * MAX_TEMPLATE_BYTES, {})) == MAX_TEMPLATE_BYTES
    assert "larger than 65536 bytes" in str(error_of("x" * (MAX_TEMPLATE_BYTES + 1), {}))
    # the limit is in bytes, as in NFD: 2-byte characters count twice
    assert "larger than" in str(error_of("é" * (MAX_TEMPLATE_BYTES // 2 + 1), {}))


def test_runaway_output_is_capped():
    data = {"l": list(range(1000))}
    template = "{{ range .l }}{{ range $.l }}" + "x" * 10 + "{{ end }}{{ end }}"  # 10 MB
    assert f"output exceeds {MAX_OUTPUT_CHARS}" in str(error_of(template, data))


def test_runaway_loops_without_output_hit_the_step_budget():
    data = {"l": list(range(1000))}
    template = "{{ range .l }}{{ range $.l }}{{ range $.l }}{{ end }}{{ end }}{{ end }}"  # 1e9 iterations
    assert f"exceeded {MAX_STEPS} steps" in str(error_of(template, data))
    assert "steps" in str(error_of("{{ range 1000000000 }}{{ end }}", {}))


def test_value_doubling_is_capped():
    template = '{{ $s := "xxxxxxxx" }}{{ range 40 }}{{ $s = printf "%s%s" $s $s }}{{ end }}{{ len $s }}'
    assert "exceeds" in str(error_of(template, {}))
    assert "exceeds" in str(error_of('{{ repeat 100000000 "ab" }}', {}))


def test_too_deep_nesting_is_rejected():
    deep_ifs = "{{ if 1 }}" * 200 + "{{ end }}" * 200
    assert "nesting deeper than" in str(error_of(deep_ifs, {}))
    deep_parens = "{{ " + "(" * 500 + "1" + ")" * 500 + " }}"
    assert "nesting deeper than" in str(error_of(deep_parens, {}))
    assert render("{{ if 1 }}" * 30 + "ok" + "{{ end }}" * 30, {}) == "ok"


def test_no_python_attribute_access():
    class Secret:
        token = "hunter2"

        def __str__(self) -> str:
            return "opaque"

    # .token would be getattr in a naive engine; Go templates on this engine only read map keys
    error = error_of("{{ .obj.token }}", {"obj": Secret()})
    assert "can't evaluate field token" in error.message
    assert "__class__" in error_of("{{ .s.__class__ }}", {"s": "x"}).message
    assert render("{{ index .m \"__class__\" }}|", {"m": {"a": "b"}}) == "|"


def test_compile_once_render_many_is_pure():
    compiled = compile_template("{{ range .l }}{{ . }}{{ end }}")
    assert isinstance(compiled, CompiledTemplate)
    assert compiled.render({"l": [1, 2]}) == "12"
    assert compiled.render({"l": ["a"]}) == "a"
    data = {"l": ["x"], "m": {"b": 1}}
    render('{{ $d := .m }}{{ range .l }}{{ $x := list . }}{{ end }}', data)
    assert data == {"l": ["x"], "m": {"b": 1}}


def test_non_string_template_is_a_template_error():
    with pytest.raises(TemplateError):
        render(b"{{ 1 }}", {})  # type: ignore[arg-type]


# -- property: any input gives a string or a TemplateError, never anything else --------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_FRAGMENTS = [
    "{{", "}}", "{{- ", " -}}", "{{/*", "*/}}", " ", "\n", "\t", ".", ".a", ".l", ".m", ".a.b",
    "$", "$x", "$y", ":=", "=", "|", "(", ")", ",", "range", "if", "else", "end", "with", "break",
    "continue", "define", "len", "index", "slice", "printf", "print", "println", "eq", "ne", "lt",
    "ge", "and", "or", "not", "add", "sub", "div", "mod", "lower", "join", "list", "split", "first",
    "splitList", "regexReplaceAll", "regexMatch", "default", "uniq", "sortAlpha", "repeat", "int",
    "quote", '"s"', '"%d%s%q%v%5.2f%!"', '"("', '"a*"', '"$1"', "`r`", "1", "-1", "0x", "1.5",
    "1e9", "'c'", "nil", "true", "x", "é", "\\", '"', "'", "-", "#",
]

_DATA = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
    | st.floats(allow_nan=True),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from("abclm"), children, max_size=4),
    max_leaves=12,
)


def _well_formed() -> st.SearchStrategy[str]:
    """Templates that mostly parse, so execution paths get exercised too."""
    operand = st.sampled_from([".", ".a", ".l", ".m", ".a.b", "$", "$.l", "1", "-2", '"s"', "nil", "true",
                               "(list 1 2)", '(split "," "a,b")', "(len .l)"])
    function = st.sampled_from(["print", "len", "index", "eq", "lt", "and", "or", "not", "printf",
                                "join", "default", "first", "add", "upper", "toString", "slice"])
    command = st.one_of(operand, st.builds(lambda f, args: f + " " + " ".join(args), function,
                                           st.lists(operand, max_size=3)))
    pipeline = st.builds(lambda cmds: " | ".join(cmds), st.lists(command, min_size=1, max_size=3))
    action = st.builds(lambda p: "{{ " + p + " }}", pipeline)

    def nest(inner):
        control = st.builds(
            lambda kind, p, body, other: "{{ " + kind + " " + p + " }}" + body
            + ("{{ else }}" + other if other else "") + "{{ end }}",
            st.sampled_from(["if", "with", "range", "range $i, $e :="]), pipeline, inner, inner | st.just(""),
        )
        return st.lists(control | inner, max_size=3).map("".join)

    return st.recursive(action | st.text(alphabet="ab \n{}", max_size=4), nest, max_leaves=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    template=st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=3), max_size=30).map("".join)
    | _well_formed(),
    data=st.dictionaries(st.sampled_from(["a", "l", "m", "n"]), _DATA, max_size=4),
)
def test_random_templates_only_return_str_or_raise_template_error(template, data):
    try:
        result = render(template, data)
    except TemplateError as error:
        assert error.message
        return
    assert isinstance(result, str)
    assert len(result) <= MAX_OUTPUT_CHARS


# Go regexp semantics are checked against real Go's output: tests/rules/test_go_regexp_corpus.py


@pytest.mark.parametrize("template,where", [
    ('{{ regexFind "(" .a }}', "1:14"),
    ('x\n{{ .a | regexReplaceAll "a{1001}" "y" }}', "2:25"),
    ('{{ if mustRegexMatch "[[:foo:]]" .a }}{{ end }}', "1:22"),
    ('{{ regexSplit "\\\\C" .a -1 }}', "1:15"),
])
def test_a_regexp_literal_go_rejects_fails_at_load_with_its_position(template, where):
    with pytest.raises(TemplateError) as info:
        compile_template(template)
    assert str(info.value).startswith(f"template:{where}: ") and "error parsing regexp" in str(info.value)


def test_regex_match_keeps_sprigs_meaning_for_a_bad_pattern():
    assert render('{{ regexMatch "[" .a }}', {"a": "x"}) == "false"  # Sprig ignores the error, as NFD does
