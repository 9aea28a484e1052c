"""`python -m pytest_glm5.sim`: the SGLang emulator."""

from .lifecycle import main

raise SystemExit(main())
