"""The registry of synthesis strategies that :func:`~ccsynth.synth.synthesize.synthesize` walks.

Like PuLP's ``getSolver(name)`` or networkx's ``flow_func``: a strategy is an
object with ``name``, ``preference`` (ties in simulated time go to the lower)
and the two methods of :class:`~.base.Strategy`, one module each. The
default walk, in order:

1. :mod:`.multidim` -- the multi-dimension schedulers (topologies with dimensions);
2. :mod:`.trees` -- packed spanning trees;
3. :mod:`.milp` -- TACCL's MILP stages (steps aside on large machines the two above serve);
4. :mod:`.baselines` -- every baseline at its best chunk factor, where it could compete
   (searched against what the strategies before it found).

Adding a strategy is a new module and one :func:`register` call
(``before="baseline"`` to have the baselines searched against it too);
:func:`strategies` is the walk; a caller may also pass its own sequence of
strategies to ``synthesize(..., strategies=...)``.

Example:
    >>> [s.name for s in strategies()]
    ['multidim', 'trees', 'milp', 'baseline']
"""

from __future__ import annotations

from ccsynth.errors import CCSynthError
from ccsynth.synth.strategies import baselines, milp, multidim, trees
from ccsynth.synth.strategies.base import Strategy

__all__ = ["DEFAULT_STRATEGIES", "strategies", "register", "unregister", "get_strategy"]

DEFAULT_STRATEGIES: tuple[Strategy, ...] = (multidim.STRATEGY, trees.STRATEGY, milp.STRATEGY, baselines.STRATEGY)

_registered: list[Strategy] = list(DEFAULT_STRATEGIES)


def strategies() -> tuple[Strategy, ...]:
    """The registered strategies, in the order :func:`~ccsynth.synth.synthesize.synthesize` walks them."""
    return tuple(_registered)


def get_strategy(name: str) -> Strategy:
    """The registered strategy called ``name`` (:class:`~ccsynth.errors.CCSynthError` naming the known ones)."""
    for s in _registered:
        if s.name == name:
            return s
    raise CCSynthError(f"no synthesis strategy {name!r}; registered: {', '.join(s.name for s in _registered)}")


def register(strategy: Strategy, *, before: str | None = None) -> None:
    """Add ``strategy`` to the walk: at the end, or before the strategy named ``before``.

    A strategy of the same name is replaced in place.
    """
    if not isinstance(strategy, Strategy) or not isinstance(getattr(strategy, "name", None), str):
        raise CCSynthError(f"a synthesis strategy needs a name, applies() and candidates(); got {strategy!r}")
    names = [s.name for s in _registered]
    if strategy.name in names:
        _registered[names.index(strategy.name)] = strategy
        return
    if before is None:
        _registered.append(strategy)
        return
    _registered.insert(names.index(get_strategy(before).name), strategy)


def unregister(name: str) -> Strategy:
    """Remove the strategy called ``name`` from the walk; returns it."""
    s = get_strategy(name)
    _registered.remove(s)
    return s
