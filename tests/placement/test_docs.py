"""deploy/placement.md says what the code does: its metrics table
is exactly the registered metrics, its Events table exactly the reasons the code posts, its
failure table every on-error value the annotation accepts."""

from __future__ import annotations

import re

from agent.placement.metrics import PlacementMetrics
from agent.placement.policy import ON_ERROR_ANNOTATION, parse_on_error
from tests.conftest import REPO
from tests.test_docs import section, table_first_cells

BODY = (REPO / "deploy/placement.md").read_text()


class _Counters:
    def __init__(self) -> None:
        self.requests = {("r.example", 200): 1}
        self.cache = {("tag", "hit"): 1}


def test_the_metrics_table_is_the_registered_metrics() -> None:
    documented = {c.strip("`") for c in table_first_cells(section(BODY, "## Events and metrics")) if c.startswith("`nfa")}
    exposed = PlacementMetrics(lambda: _Counters()).render().decode()
    registered = {m for m in re.findall(r"^# TYPE (\S+) ", exposed, re.M) if not m.endswith("_created")}
    assert documented == registered


def test_the_events_table_is_the_reasons_the_code_posts() -> None:
    documented = {c.strip("`") for c in table_first_cells(section(BODY, "## Events and metrics")) if c.startswith("`Arch")
                  or c.startswith("`NoCommon")}
    code = "".join(p.read_text() for p in (REPO / "agent/placement").glob("*.py"))
    posted = set(re.findall(r'"((?:Arch|NoCommon)[A-Za-z]+)"', code))
    assert documented == posted


def test_every_documented_on_error_value_is_accepted() -> None:
    values = [m.group(1) for c in table_first_cells(section(BODY, "## Failure semantics")) if (m := re.match(r"`([^`]+)`", c))]
    assert values == ["ungate", "hold", "fallback:<arch>"]
    for value in values:
        assert not parse_on_error({ON_ERROR_ANNOTATION: value.replace("<arch>", "arm64")}).problem
