"""`python -m pytest_glm5.sim`: the SGLang emulator."""

from .app import main

raise SystemExit(main())
