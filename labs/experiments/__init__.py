"""Experiments: seed 004's cascading-failure measurements and the backoff-and-jitter study,
run in virtual time on the engine (:mod:`labs.engine`), with a fixed seed.

Pure Python, no Django. ``EXPERIMENTS`` maps a name to its :class:`Experiment`; each
experiment's module holds its parameter dataclass, ``LIMITS``, ``validate`` and ``run``.
"""

from __future__ import annotations

from labs.experiments import (
    amplification,
    breaker,
    contention,
    deadline,
    metastable,
    queueing,
    storm,
    tipping_point,
)
from labs.experiments.base import Experiment

__all__ = ["EXPERIMENTS", "Experiment", "get"]

_MODULES = (
    amplification,
    storm,
    breaker,
    deadline,
    contention,
    metastable,
    tipping_point,
    queueing,
)
EXPERIMENTS: dict[str, Experiment] = {
    module.EXPERIMENT.name: module.EXPERIMENT for module in _MODULES
}


def get(name: str) -> Experiment:
    """The experiment called ``name``. Raises KeyError listing the known names."""
    try:
        return EXPERIMENTS[name]
    except KeyError:
        raise KeyError(
            f"unknown experiment {name!r} (experiments: {', '.join(EXPERIMENTS)})"
        ) from None
