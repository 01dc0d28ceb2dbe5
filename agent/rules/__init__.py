"""Rule catalogue: load label files and NodeFeatureRule YAML, evaluate them into desired state.

    catalogue = load_catalogue(["labels/"])           # never raises; catalogue.problems
    state = plan_node(features, raw_labels, node_labels, catalogue)   # pure
    trace = plan(features, raw_labels, node_labels, catalogue)        # state + explain trace

Formats, our extensions (``node.label``, ``@count``) and the namespace policy are documented
in ``labels/README.md``.
"""

from agent.rules.loader import load_catalogue
from agent.rules.model import Catalogue, RuleOptions
from agent.rules.planner import LabelFileResult, Plan, plan, plan_node

__all__ = ["Catalogue", "LabelFileResult", "Plan", "RuleOptions", "load_catalogue", "plan", "plan_node"]
