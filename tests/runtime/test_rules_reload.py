"""Rule reloads: real files, real watchfiles, ConfigMap ``..data`` swaps, last-good fallback."""

import os
import threading

from agent.runtime.rules_state import RulesState, fingerprint, problem_key
from agent.runtime.rules_watch import RulesWatcher, watch_roots
from tests.runtime.configmap import write_configmap

GOOD = {"example.com/edgetpu": "feature.node.kubernetes.io/usb-ff_18d1_9302.present\n"}
GOOD2 = {"example.com/edgetpu": "feature.node.kubernetes.io/usb-ff_18d1_9302.present\n",
         "example.com/ncs2": "feature.node.kubernetes.io/usb-ff_03e7_2485.present\n"}
BROKEN = {**GOOD2, "rules.yaml": "apiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeatureRule\nmetadata: {name: x\n"}


def names(catalogue):
    return sorted(f.key for f in catalogue.label_files)


def test_edit_accepted_broken_edit_keeps_last_good_then_fix_accepted(tmp_path):
    rules = tmp_path / "rules"
    write_configmap(rules, GOOD)
    rejected = []
    state = RulesState([str(rules)], on_rejected=rejected.append)
    assert names(state.catalogue) == ["example.com/edgetpu"]
    assert state.reload().changed is False  # nothing changed on disk: no reload at all

    write_configmap(rules, GOOD2)
    result = state.reload()
    assert result.changed and not result.rejected
    assert names(state.catalogue) == ["example.com/edgetpu", "example.com/ncs2"]
    assert state.generation == 1

    write_configmap(rules, BROKEN)
    result = state.reload()
    assert result.rejected and not result.changed
    assert names(state.catalogue) == ["example.com/edgetpu", "example.com/ncs2"]  # last good kept
    assert not state.catalogue.problems
    assert len(rejected) == 1 and "invalid YAML" in rejected[0] and "last good" in rejected[0]
    assert state.reload().rejected and len(rejected) == 1  # same broken content: reported once

    write_configmap(rules, {"example.com/edgetpu": GOOD["example.com/edgetpu"]})
    assert state.reload().changed
    assert names(state.catalogue) == ["example.com/edgetpu"] and state.last_error is None


def test_removed_directory_is_refused(tmp_path):
    rules = tmp_path / "rules"
    write_configmap(rules, GOOD)
    state = RulesState([str(rules)])
    import shutil
    shutil.rmtree(rules)
    assert state.reload().rejected
    assert names(state.catalogue) == ["example.com/edgetpu"]


def test_first_load_is_used_even_with_problems_and_known_problems_do_not_block(tmp_path):
    rules = tmp_path / "rules"
    write_configmap(rules, BROKEN)
    state = RulesState([str(rules)])
    assert state.catalogue.problems  # used anyway: nothing better exists
    # an edit elsewhere that only moves the known problem down a line is not a new error
    edited = dict(BROKEN, **{"rules.yaml": "# comment\n" + BROKEN["rules.yaml"]})
    edited.pop("example.com/ncs2")
    write_configmap(rules, edited)
    assert state.reload().changed
    assert names(state.catalogue) == ["example.com/edgetpu"]


def test_problem_key_ignores_line_numbers():
    class P:
        origin, item, reason = "/r/x.yaml:4", "yaml", "bad"

    class Q:
        origin, item, reason = "/r/x.yaml:9", "yaml", "bad"

    assert problem_key(P) == problem_key(Q)


def test_fingerprint_follows_symlinks_and_survives_loops(tmp_path):
    rules = tmp_path / "rules"
    write_configmap(rules, GOOD)
    before = fingerprint([str(rules)])
    write_configmap(rules, GOOD)  # a swap with identical content
    assert fingerprint([str(rules)]) == before
    os.symlink("..", rules / "example.com" / "loop")
    fingerprint([str(rules)])  # returns, does not recurse forever
    assert fingerprint([str(tmp_path / "absent")]) != before


def test_watch_roots(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert watch_roots([str(real)]) == [str(real)]
    assert watch_roots([str(tmp_path / "missing" / "deeper")]) == [str(tmp_path)]
    # never a whole filesystem: `--rules /nonexistent` once watched / recursively (100 % CPU, GBs)
    assert watch_roots(["/nonexistent-rules-dir"]) == []
    assert watch_roots(["/tmp/nonexistent-rules-dir/x"]) == []
    assert watch_roots([str(tmp_path / "link")]) == [str(tmp_path)]  # parent covers real too
    assert watch_roots([str(real), str(real / "sub")]) == [str(real)]


def _watch(dirs, state):
    changed = threading.Event()

    def on_change():
        if state.reload().changed:
            changed.set()

    return RulesWatcher([str(d) for d in dirs], on_change, debounce_ms=50, step_ms=50), changed


def test_watcher_sees_a_configmap_swap_and_stops(tmp_path):
    rules = tmp_path / "rules"
    write_configmap(rules, GOOD)
    state = RulesState([str(rules)])
    watcher, changed = _watch([rules], state)
    watcher.start()
    assert watcher.ready.wait(20) and watcher.failed is None
    try:
        write_configmap(rules, GOOD2)
        assert changed.wait(20), "the ..data swap was not noticed"
        assert names(state.catalogue) == ["example.com/edgetpu", "example.com/ncs2"]
    finally:
        watcher.stop()
    assert not watcher.alive()


def test_watcher_sees_a_directory_created_later(tmp_path):
    rules = tmp_path / "later"
    state = RulesState([str(rules)])  # missing at start: a problem, used anyway
    watcher, changed = _watch([rules], state)
    watcher.start()
    assert watcher.ready.wait(20) and watcher.failed is None
    try:
        rules.mkdir()
        (rules / "example.com").mkdir()
        (rules / "example.com" / "edgetpu").write_text(GOOD["example.com/edgetpu"])
        assert changed.wait(20)
        wait = threading.Event()
        for _ in range(100):  # the file may land after the directory event: settle
            if names(state.catalogue) == ["example.com/edgetpu"]:
                break
            wait.wait(0.1)
            state.reload()
        assert names(state.catalogue) == ["example.com/edgetpu"]
    finally:
        watcher.stop()
