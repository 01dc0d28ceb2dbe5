"""The short chaos soak, run in CI: the real agent process under hotplugs,
rules edits (valid and broken), the whole API fault matrix at a compressed cadence, a foreign
writer and heartbeats. Only correctness is asserted — ledger, final Node equal to ``plan``,
every broken edit's RulesInvalid Event, no traceback, clean SIGTERM; the timing figures are
printed by ``bench/soak.py`` and judged in bench/README.md, never here (a 2-core box)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_short_soak_ends_correct():
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "soak.py"), "--duration", "40", "--fault-every", "3.5",
         "--rules-every", "7", "--warmup", "10", "--sample-every", "2", "--json", "--check"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    head, _, _ = done.stdout.partition("\nFAIL")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(head)
    assert result["hotplugs"] >= 10 and result["faults"] >= 5
    assert result["ledger"]["violations"] == [] and result["ledger"]["agent_writes_checked"] > 0
    assert result["final_equals_plan"], result["final_differences"]
    assert result["rules_edits"]["invalid"] >= 1
    assert result["rules_edits"]["RulesInvalid_events"] >= result["rules_edits"]["invalid"]
    assert result["tracebacks"] == 0 and result["agent_alive_at_end"]
    assert result["sigterm"]["exit_code"] == 0
