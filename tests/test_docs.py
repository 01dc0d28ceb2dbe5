"""The operator docs stay true: README.md's quick start and command list, deploy/README.md's
`run` flag table and metrics table, and every relative link, checked against the code."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess

import pytest

from agent.cli import build_parser, main
from agent.config import IMAGE_RULES_DIR, default_rules_dirs
from agent.runtime.metrics import AgentMetrics
from tests.conftest import LABELS_DIR, REPO

README = REPO / "README.md"
DEPLOY_README = REPO / "deploy" / "README.md"


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
    cells = table_first_cells(section(DEPLOY_README.read_text(), "## The `run` command's flags"))
    documented = {re.match(r"`(--[a-z-]+)", c).group(1) for c in cells}
    assert documented == public_flags(subparsers()["run"])


def test_flag_table_check_can_fail():
    """A flag added to run without a doc row is caught (the comparison is not vacuous)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--not-documented")
    parser.add_argument("--hidden", help=argparse.SUPPRESS)
    assert public_flags(parser) == {"--not-documented"}


def test_documented_udev_modes_are_accepted_by_run():
    body = section(DEPLOY_README.read_text(), "## The udev switch: `--udev-mode`")
    modes = [re.match(r"`([^`]+)`", c).group(1) for c in table_first_cells(body)]
    assert {"kernel", "udev", "poll", "off"} <= set(modes)
    run = subparsers()["run"]
    for mode in modes:
        assert run.parse_args([f"--udev-mode={mode}"]).udev_mode == mode


def test_metrics_table_lists_exactly_the_registered_metrics():
    body = section(DEPLOY_README.read_text(), "## Metrics")
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


@pytest.mark.parametrize("path", [README, DEPLOY_README], ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(path):
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text())
    assert links
    for link in links:
        assert (path.parent / link).exists(), link


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
#: part of a longer path (an upstream repository's ``docs/.../x.md``) is not one.
PRIVATE_CITATION = re.compile(
    rb"shared/(?:reference|seeds)\b|(?<![\w/.-])(?:kubernetes-api|nfd|placement|seeds|style)\.md\b")


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
                  "placement.py", "style" + ".mdx", "a_style" + ".md"]
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
    text = DEPLOY_README.read_text()
    assert uninstall_order_problems(section(text, "## Uninstall")) == []
    helm = section(text, "## Uninstall").split("With Helm", 1)[1]
    assert helm.index("placement.admission=none") < helm.index("helm uninstall")
    # the placement section's own uninstall deletes the admission first too
    own = section(text, "### Uninstall, or releasing pods by hand")
    lines = [line.strip() for line in own.splitlines() if line.startswith("    ")]
    assert lines[0].startswith("kubectl delete -f deploy/placement-policy.yaml"), lines


def test_uninstall_order_check_can_fail():
    body = section(DEPLOY_README.read_text(), "## Uninstall")
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
