"""`python -m pytest_glm5.cli`: the `glm5` command."""

from . import main

raise SystemExit(main())
