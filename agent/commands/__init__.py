"""Subcommands of ``node-feature-agent``; see ``agent.cli``."""
