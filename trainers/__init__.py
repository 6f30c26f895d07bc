"""Training: the sync and async loops, learners, algorithms, checkpoints."""

import agents  # noqa: F401  (transformers without scikit-learn: agents/hf_imports.py)
