"""The agent side: models, engines, sampling, the agent loop."""

from agents import hf_imports

hf_imports.install()
