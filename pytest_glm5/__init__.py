"""pytest-glm5: the performance regression gate for LLM serving (GLM-5 under SGLang on SM120)."""

__version__ = "0.1.0"
