"""node-feature-agent: node-local hardware discovery and generalized labelling for Kubernetes."""

__version__ = "0.1.0"
