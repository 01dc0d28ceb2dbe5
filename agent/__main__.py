"""``python -m agent`` is the same as the ``node-feature-agent`` console script."""

from agent.cli import main

raise SystemExit(main())
