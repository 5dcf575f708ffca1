"""Contracts every Planloop process shares: models, Redis keys, the state store, errors."""
