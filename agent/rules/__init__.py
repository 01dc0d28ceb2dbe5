"""Rule catalogue: load label files and NodeFeatureRule YAML, evaluate them into desired state.

    catalogue = load_catalogue(["labels/"])           # never raises; catalogue.problems
    state = desired_state(features, raw_labels, node_labels, catalogue)   # pure
    derivation = derive(features, raw_labels, node_labels, catalogue)     # state + explain trace

Formats, our extensions (``node.label``, ``@count``) and the namespace policy are documented
in ``labels/README.md``.
"""

from agent.rules.desired_state import Derivation, LabelFileResult, derive, desired_state
from agent.rules.loader import load_catalogue
from agent.rules.model import Catalogue, RuleOptions

__all__ = ["Catalogue", "Derivation", "LabelFileResult", "RuleOptions", "derive", "desired_state", "load_catalogue"]
