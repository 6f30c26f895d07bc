"""transformers without scikit-learn or scipy: installed by `import agents` (and so by `import trainers`).

transformers' decoding code (`transformers.generation.candidate_generator`, which every
`from transformers import AutoTokenizer` or model load reaches) imports scikit-learn, and
with it scipy.stats, when it is installed (MLflow installs it), for one function of assisted
decoding's confidence threshold, which skyrl never uses. That import is 2.8 s of every
process that loads a tokenizer or a model on a 2-core machine: the `skyrl train` driver,
each learner and engine worker, `skyrl eval`, `skyrl serve`. This finder, first on the
import path, sees that module about to load and tells transformers scikit-learn is absent;
it finds nothing itself, and no other import is touched. scikit-learn stays importable.

Likewise scipy for transformers' losses (`transformers.loss`, which every model load
reaches): its object-detection losses import `scipy.optimize` for their Hungarian matching,
0.25 s of every learner and engine worker; skyrl trains causal language models only.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

_ABSENT = {
    "transformers.generation.candidate_generator": "is_sklearn_available",
    "transformers.loss.loss_utils": "is_scipy_available",
}
"""A module of transformers -> the availability check it must see fail when it loads."""


def _absent() -> bool:
    return False


class _SeenAbsent(MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        check = _ABSENT.get(fullname)
        if check and (utils := sys.modules.get("transformers.utils")):
            setattr(utils, check, _absent)
        return None


def install() -> None:
    """Put the finder first on `sys.meta_path`, once per process."""
    if not any(isinstance(f, _SeenAbsent) for f in sys.meta_path):
        sys.meta_path.insert(0, _SeenAbsent())
