"""The operator docs stay true: README.md's quick start and command list, deploy/operating.md's
`run` flag table and udev modes, deploy/metrics.md's metrics table, and every relative link,
anchor and section citation, checked against the code and the headings they name."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from agent.cli import build_parser, main
from agent.config import IMAGE_RULES_DIR, default_rules_dirs
from agent.runtime.event_sources import MODES
from agent.runtime.metrics import AgentMetrics
from tests.conftest import LABELS_DIR, REPO

README = REPO / "README.md"
DEPLOY = REPO / "deploy"
OPERATING = DEPLOY / "operating.md"
METRICS = DEPLOY / "metrics.md"
INSTALL = DEPLOY / "install.md"
#: the operator pages (deploy/*.md) and the other READMEs people follow links from
DOC_PAGES = [README, REPO / "labels" / "README.md", REPO / "bench" / "README.md",
             REPO / "tests" / "support" / "README.md", *sorted(DEPLOY.glob("*.md"))]


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def section(text: str, heading: str) -> str:
    """The body of the markdown section starting at ``heading`` up to the next heading of its level."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1:]
    nxt = re.search(rf"^{level} ", rest, re.M)
    return rest[: nxt.start()] if nxt else rest


def table_first_cells(body: str) -> list[str]:
    rows = [line for line in body.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return [row.split("|")[1].strip() for row in rows[1:]]  # without the header row


def public_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions if action.help != argparse.SUPPRESS
            for opt in action.option_strings if opt.startswith("--") and opt != "--help"}


def test_run_flag_table_matches_run_help():
    cells = table_first_cells(section(OPERATING.read_text(), "## The `run` command's flags"))
    documented = {re.match(r"`(--[a-z-]+)", c).group(1) for c in cells}
    assert documented == public_flags(subparsers()["run"])


def test_flag_table_check_can_fail():
    """A flag added to run without a doc row is caught (the comparison is not vacuous)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--not-documented")
    parser.add_argument("--hidden", help=argparse.SUPPRESS)
    assert public_flags(parser) == {"--not-documented"}


def test_documented_udev_modes_are_accepted_by_run():
    body = section(OPERATING.read_text(), "## The udev switch: `--udev-mode`")
    modes = [re.match(r"`([^`]+)`", c).group(1) for c in table_first_cells(body)]
    assert {"kernel", "udev", "poll", "off"} <= set(modes)
    assert sorted(modes) == sorted(MODES)  # a mode run accepts without a row here is undocumented
    run = subparsers()["run"]
    for mode in modes:
        assert run.parse_args([f"--udev-mode={mode}"]).udev_mode == mode


def test_metrics_table_lists_exactly_the_registered_metrics():
    body = section(METRICS.read_text(), "## Metrics")
    documented = {c.strip("`") for c in table_first_cells(body)}
    exposed = AgentMetrics().render().decode()
    # as scraped; prometheus_client's per-series "<counter>_created" timestamps are not ours to document
    registered = {m for m in re.findall(r"^# TYPE (\S+) ", exposed, re.M) if not m.endswith("_created")}
    assert "nfa_rules_reload_total" in documented
    assert documented == registered


def test_readme_commands_list_is_every_subcommand():
    body = section(README.read_text(), "## Commands")
    listed = re.findall(r"^- `([a-z-]+)", body, re.M)
    assert listed == list(subparsers())


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    each space a hyphen (``NFD's worker configuration: `--config` `` -> ``nfds-worker-configuration---config``)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's fragment on a markdown page, outside fenced code blocks."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    """Relative links of a page whose file does not exist, or whose ``#fragment`` is no heading there."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    broken = []
    for target, fragment in re.findall(r"\]\(([^)#:\s]*)(?:#([^)\s]*))?\)", text):
        if not target and not fragment:
            continue
        linked = (page.parent / target) if target else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}#{fragment}: no such heading")
    return broken


@pytest.mark.parametrize("path", DOC_PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_and_anchors_resolve(path):
    assert broken_links(path) == []


def test_the_pages_link_each_other():
    """The link check is not vacuous: the index and the top README link to the pages."""
    for page in (README, DEPLOY / "README.md"):
        assert re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text())


def test_link_check_can_fail(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## The image: `x`\n")
    page = tmp_path / "page.md"
    page.write_text("## Here\n[a](other.md#the-image-x) [b](#here) [c](missing.md) [d](other.md#the-image)"
                    " [e](#nowhere)\n```\n[f](in-code.md)\n```\n")
    assert broken_links(page) == ["missing.md: no such file", "other.md#the-image: no such heading",
                                  "#nowhere: no such heading"]


#: A prose citation of a section, ``deploy/install.md "The image"`` or ``labels/README.md,
#: "Devices"`` (in a comment, docstring, log or Event message, or a doc page).
SECTION_CITATION = re.compile(rb'\b((?:deploy|labels|bench)/[\w-]+\.md),?[ \t]+\(?\\?"([^"\\\n]+)\\?"')


def titles(page: Path) -> list[str]:
    """What a citation may name on a page: its headings and its bold paragraph titles."""
    text = page.read_text().replace("`", "")
    return [t.lower() for t in re.findall(r"^#{1,6} (.+)$", text, re.M) + re.findall(r"\*\*([^*]+)\*\*", text)]


def stale_citations(name: str, data: bytes) -> list[str]:
    stale = []
    for match in SECTION_CITATION.finditer(data):
        page, cited = REPO / match.group(1).decode(), match.group(2).decode().replace("`", "").lower()
        if not page.is_file() or not any(cited in title for title in titles(page)):
            stale.append(f"{name}: {match.group(1).decode()} \"{match.group(2).decode()}\"")
    return stale


def test_every_section_citation_names_a_section_of_that_page():
    """Code, manifests and docs cite a section by page and title; when a section moves to another
    page, every citation follows it (a stale one names a page without that section)."""
    files = [name for name in tracked_files() if (REPO / name).is_file()]
    found = [m for name in files for m in SECTION_CITATION.finditer((REPO / name).read_bytes())]
    assert len(found) > 10
    assert [s for name in files for s in stale_citations(name, (REPO / name).read_bytes())] == []


def test_section_citation_check_can_fail():
    page = "deploy/" + "install.md"
    assert stale_citations("x", f'see {page} "The image".'.encode()) == []
    assert stale_citations("x", f'({page}, "Least privilege")'.encode()) == []
    assert stale_citations("x", f'({page} "Device plugin mode")'.encode()) != []
    assert stale_citations("x", ('deploy/' + 'README.md "The image"').encode()) != []


#: An operator page longer than this is several topics: split it (one page per topic).
PAGE_LINES = 400


def test_operator_pages_are_one_topic_each():
    lengths = {p.name: len(p.read_text().splitlines()) for p in DEPLOY.glob("*.md")}
    assert {name: n for name, n in lengths.items() if n > PAGE_LINES} == {}


def quick_start_lines() -> list[str]:
    body = section(README.read_text(), "## Quick start (no cluster needed)")
    return [line.strip() for line in body.splitlines() if line.startswith("    ")]


def test_quick_start_is_one_setup_line_and_one_test_line():
    lines = quick_start_lines()
    assert lines[-1] == "bash .ci/run"
    assert lines[0].startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && ")
    assert [line for line in lines if "pip install" in line or ".ci/run" in line] == [lines[0], lines[-1]]


def test_quick_start_extra_examples_run(capsys, monkeypatch):
    """Lines between set-up and tests are further things to try; each must work as written."""
    monkeypatch.chdir(REPO)
    examples = quick_start_lines()[1:-1]
    assert any(" discover " in line for line in examples)
    for line in examples:
        job = shlex.split(line)
        assert job[0] == ".venv/bin/node-feature-agent"
        assert main(job[1:]) == 0, line
        assert "feature.node.kubernetes.io/" in capsys.readouterr().out


def test_quick_start_main_job_runs_and_shows_discovery_and_the_plan(capsys, monkeypatch):
    """The job after set-up, as the installed console script would run it (same entry point),
    with the default rules dir: in an editable install that is the repo's labels/."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("NODE_FEATURE_AGENT_RULES", raising=False)
    assert default_rules_dirs() == [str(LABELS_DIR)]
    job = shlex.split(quick_start_lines()[0].rsplit("&& ", 1)[1])
    assert job[0] == ".venv/bin/node-feature-agent"
    assert main(job[1:]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  accelerators/edgetpu +true +<- .*labels/rules/accelerators\.yaml:\d+$", out, re.M)  # a rule
    assert re.search(r"^  feature\.node\.kubernetes\.io/usb-ff_18d1_9302\.present +true +<- discovery$", out, re.M)
    assert re.search(r"^  node-feature-agent\.io/edgetpu +1 ", out, re.M)  # extended resource


def test_image_default_rules_dir_is_where_the_dockerfile_copies_labels():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"COPY labels/ {IMAGE_RULES_DIR}/" in dockerfile
    assert f"NODE_FEATURE_AGENT_RULES={IMAGE_RULES_DIR}" in dockerfile


#: A citation of the team's private notes (a ``shared/`` reference or seed file, or one of
#: the notes by its bare file name) rather than of the upstream source. A file name that is
#: part of a longer path (an upstream repository's ``docs/.../x.md``) is not one, nor is a markdown
#: link's target (``](placement.md)``: a page of this repository, checked to exist above).
PRIVATE_CITATION = re.compile(
    rb"shared/(?:reference|seeds)\b|(?<![\w/.-])(?<!\]\()(?:kubernetes-api|nfd|placement|seeds|style)\.md\b")


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name]


def test_no_tracked_file_cites_private_notes():
    """A reader of the repository has the upstream sources, not the notes the team worked from:
    code, tests, docs, fixtures and bench output cite the former."""
    files = tracked_files()
    assert "tests/test_docs.py" in files
    citing = [f"{name}: {match.group().decode()}" for name in files if (REPO / name).is_file()
              for match in [PRIVATE_CITATION.search((REPO / name).read_bytes())] if match]
    assert citing == []


def test_private_citation_pattern_can_fail():
    # The names are split so that this file does not cite them itself.
    cited = ["see shared/" + "reference/kubernetes-api.md", "(shared/" + "seeds/x)",
             "nfd" + ".md section 4", "kubernetes-api" + ".md 2.1", "`placement" + ".md`"]
    legitimate = ["docs/usage/nfd" + ".md", "shared/" + "references", "the seeds of a hash",
                  "placement.py", "style" + ".mdx", "a_style" + ".md", "[Placement](placement" + ".md#running-it)"]
    assert [bool(PRIVATE_CITATION.search(s.encode())) for s in cited] == [True] * len(cited)
    assert [bool(PRIVATE_CITATION.search(s.encode())) for s in legitimate] == [False] * len(legitimate)


#: placement's cluster-wide admission objects: (kind, name) from the plain manifests
ADMISSION_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "MutatingWebhookConfiguration")


def admission_objects() -> set[tuple[str, str]]:
    import yaml

    found = set()
    for name in ("placement-policy.yaml", "placement-policy-v1beta1.yaml", "placement-webhook.yaml"):
        for doc in yaml.safe_load_all((REPO / "deploy" / name).read_text()):
            if doc and doc["kind"] in ADMISSION_KINDS:
                found.add((doc["kind"], doc["metadata"]["name"]))
    return found


def uninstall_order_problems(body: str) -> list[str]:
    """What is wrong with an Uninstall section's commands: every admission object must be
    deleted by a command that comes before any other command (a pod gated once the controller
    is gone is never released), and the text must say why."""
    block = re.search(r"```sh\n(.*?)```", body, re.S)
    if block is None:
        return ["no sh block"]
    commands = [line.strip() for line in block.group(1).splitlines() if line.strip() and not line.strip().startswith("#")]
    deletes: dict[tuple[str, str], int] = {}
    for index, command in enumerate(commands):
        words = shlex.split(command)
        if words[:2] == ["kubectl", "delete"] and len(words) > 3 and not words[2].startswith("-"):
            kinds = {k.lower() for k in words[2].split(",")}
            for kind, name in admission_objects():
                if kind.lower() in kinds and name in words[3:]:
                    deletes.setdefault((kind, name), index)
    problems = [f"{kind} {name} is never deleted" for kind, name in sorted(admission_objects() - set(deletes))]
    first_other = min((i for i in range(len(commands)) if i not in deletes.values()), default=len(commands))
    problems += [f"{kind} {name} is deleted after `{commands[first_other]}`"
                 for (kind, name), index in sorted(deletes.items()) if index > first_other]
    prose = body[: block.start()]
    if not ("cluster-wide" in prose and "gated" in prose):
        problems.append("the text before the commands does not say why (cluster-wide, gated)")
    return problems


def test_uninstall_removes_placement_admission_first_and_says_why():
    text = INSTALL.read_text()
    assert uninstall_order_problems(section(text, "## Uninstall")) == []
    helm = section(text, "## Uninstall").split("With Helm", 1)[1]
    assert helm.index("placement.admission=none") < helm.index("helm uninstall")
    # the placement page's own uninstall deletes the admission first too
    own = section((REPO / "deploy/placement.md").read_text(), "## Uninstall, or releasing pods by hand")
    lines = [line.strip() for line in own.splitlines() if line.startswith("    ")]
    assert lines[0].startswith("kubectl delete -f deploy/placement-policy.yaml"), lines


def test_uninstall_order_check_can_fail():
    body = section(INSTALL.read_text(), "## Uninstall")
    block = re.search(r"```sh\n(.*?)```", body, re.S)
    assert block is not None
    lines = block.group(1).splitlines()
    moved = [line for line in lines if "daemonset.yaml" in line] + [line for line in lines if "daemonset.yaml" not in line]
    reordered = body[: block.start(1)] + "\n".join(moved) + "\n" + body[block.end(1):]
    assert any("deleted after `kubectl delete -f daemonset.yaml`" in p for p in uninstall_order_problems(reordered))
    assert uninstall_order_problems(body.replace("cluster-wide", "global")) != []


def rendered_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """One flag's help as ``--help`` prints it (the command's own formatter)."""
    return parser._get_formatter()._expand_help(action) if action.help else ""


def every_flag() -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    parser = build_parser()
    commands = [("node-feature-agent", parser)] + [(name, sub) for name, sub in subparsers().items()]
    return [(name, command, action) for name, command in commands for action in command._actions
            if action.help != argparse.SUPPRESS and action.option_strings and "--help" not in action.option_strings
            and "--version" not in action.option_strings]


def test_every_flag_has_help_and_states_its_default_once():
    """Flags whose help already said "(default: $NODE_NAME)" printed the default a second time,
    and some had no help at all; a default that says nothing (unset, off) is not printed."""
    problems = []
    for name, command, action in every_flag():
        text = rendered_help(command, action)
        flag = f"{name} {action.option_strings[-1]}"
        if not text.strip():
            problems.append(f"{flag}: no help")
        if text.lower().count("default") > 1:
            problems.append(f"{flag}: the default twice: {text}")
        for noise in ("(default: None)", "(default: False)", "(default: [])", "(default: )"):
            if noise in text:
                problems.append(f"{flag}: {noise}")
    assert problems == []


def test_help_of_every_command_prints_in_a_process():
    """``--help`` of each command, as a process: exit 0, the flags listed, no unexpanded
    placeholder, no default printed twice on one line (the per-flag check above, end to end)."""
    import os
    import sys

    for name in ["", *subparsers()]:
        argv = [sys.executable, "-m", "agent", *([name] if name else []), "--help"]
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"})
        assert done.returncode == 0 and done.stderr == "", (name, done.stderr)
        assert "%(" not in done.stdout and "(default: None)" not in done.stdout, name
        doubled = [line for line in done.stdout.splitlines() if line.lower().count("default") > 1]
        assert doubled == [], (name, doubled)


def test_tag_ttl_help_and_parser_agree_on_zero():
    (action,) = [a for _, command, a in every_flag() if command.prog.endswith("placement") and "--tag-ttl" in a.option_strings]
    assert "0: ask every time" in rendered_help(subparsers()["placement"], action)
    assert build_parser().parse_args(["placement", "--tag-ttl", "0"]).tag_ttl == 0.0
