"""skyrl's text environments (the contract: `environments.contract`).

Importing the package registers the built-ins with Gymnasium, so that
`gymnasium.make("skyrl/SQL-v0")` works after `import environments` alone.
"""

from environments import registry as _registry  # noqa: F401  (registers the Gymnasium ids)
