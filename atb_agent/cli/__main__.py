"""``python -m atb_agent.cli`` is ``atb`` (for machines where the console script is not installed)."""

from atb_agent.cli import main

raise SystemExit(main())
