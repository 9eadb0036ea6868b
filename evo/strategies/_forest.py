"""A small random forest regressor over knob positions, in numpy: the surrogate strategy's cost model.

Breiman's random forest as scikit-learn's ``RandomForestRegressor`` builds it by default (bootstrap
samples, every feature tried at every split, squared-error splits, trees grown until leaves are pure or
``min_leaf`` small), specialised to what a genome is: a few small integer features (a knob's value
position), so that one ``bincount`` scores every split of every feature of every node of a depth at once. Written
here rather than taken from scikit-learn: that would bring scikit-learn and SciPy (about 150 MB) into
every install and GPU image for one estimator of a few hundred points.
"""

from __future__ import annotations

import numpy

LEAF = -1


class Forest:
    def __init__(self, trees: int, seed: int, min_leaf: int = 1) -> None:
        self.trees = trees
        self.min_leaf = min_leaf
        self.rng = numpy.random.default_rng(seed)
        self._fitted: list[tuple[numpy.ndarray, ...]] = []

    def fit(self, features: numpy.ndarray, targets: numpy.ndarray) -> "Forest":
        """``features``: (samples, knobs) non-negative integers; ``targets``: (samples,) floats."""
        features = numpy.asarray(features, dtype=numpy.int64)
        targets = numpy.asarray(targets, dtype=float)
        levels = int(features.max()) + 1 if features.size else 1
        count = len(targets)
        self._fitted = []
        for _ in range(self.trees):
            chosen = self.rng.integers(0, count, count)  # a bootstrap sample
            self._fitted.append(_grow(features[chosen], targets[chosen], levels, self.min_leaf))
        return self

    def predict_each(self, features: numpy.ndarray) -> numpy.ndarray:
        """(trees, samples): every tree's prediction (their mean is the forest's, their spread its doubt)."""
        features = numpy.asarray(features, dtype=numpy.int64)
        return numpy.stack([_predict(tree, features) for tree in self._fitted])


def _grow(features: numpy.ndarray, targets: numpy.ndarray, levels: int, min_leaf: int) -> tuple[numpy.ndarray, ...]:
    """One tree, grown a depth at a time: every node of a depth is scored by one ``bincount`` over its
    (node, feature, value) cells, so the Python work is per depth, not per node (a tree of a few hundred
    samples has hundreds of nodes and a few dozen depths)."""
    count, knobs = features.shape
    offsets = numpy.arange(knobs) * levels
    width = knobs * levels
    feature, threshold = numpy.full(2 * count, LEAF), numpy.zeros(2 * count, dtype=numpy.int64)
    left, right, value = numpy.full(2 * count, LEAF), numpy.full(2 * count, LEAF), numpy.zeros(2 * count)
    samples = numpy.arange(count)  # this depth's samples: each node's together, in the bootstrap's order
    sizes, ids, nodes = numpy.array([count]), numpy.array([0]), 1  # its nodes' sample counts and numbers
    while len(ids):
        here = targets[samples]
        starts = numpy.concatenate(([0], numpy.cumsum(sizes)[:-1]))
        totals = numpy.add.reduceat(here, starts)
        value[ids] = totals / sizes
        local = numpy.repeat(numpy.arange(len(ids)), sizes)  # each sample's node within the depth
        mixed = numpy.maximum.reduceat(here, starts) != numpy.minimum.reduceat(here, starts)
        open_ = mixed & (sizes >= 2 * min_leaf)
        if not open_.any() or levels < 2:  # (every feature one value: nothing to split on)
            break
        rank = numpy.cumsum(open_) - 1  # an open node's place among the open ones
        inside = open_[local]
        m, n_open, t_open = int(open_.sum()), sizes[open_], here[inside]
        cells = ((rank[local[inside]] * width)[:, None] + offsets + features[samples[inside]]).ravel()
        counts = numpy.bincount(cells, minlength=m * width).reshape(m, knobs, levels)
        sums = numpy.bincount(cells, weights=numpy.repeat(t_open, knobs), minlength=m * width).reshape(m, knobs, levels)
        left_n, left_sum = numpy.cumsum(counts, axis=2)[:, :, :-1], numpy.cumsum(sums, axis=2)[:, :, :-1]
        right_n, right_sum = n_open[:, None, None] - left_n, sums.sum(axis=2, keepdims=True) - left_sum
        valid = (left_n >= min_leaf) & (right_n >= min_leaf) & (counts[:, :, :-1] > 0)
        with numpy.errstate(divide="ignore", invalid="ignore"):
            gain = numpy.where(valid, left_sum ** 2 / left_n + right_sum ** 2 / right_n, -numpy.inf).reshape(m, -1)
        best = numpy.argmax(gain, axis=1)
        splits = gain[numpy.arange(m), best] > totals[open_] ** 2 / n_open + 1e-12  # lowers the squared error
        if not splits.any():
            break
        best_feature, best_threshold = numpy.divmod(best[splits], levels - 1)
        split_ids, k = ids[open_][splits], int(splits.sum())
        feature[split_ids], threshold[split_ids] = best_feature, best_threshold
        left[split_ids], right[split_ids] = nodes + 2 * numpy.arange(k), nodes + 2 * numpy.arange(k) + 1
        which = numpy.full(len(ids), -1)  # a depth node's place among those split
        which[numpy.flatnonzero(open_)[splits]] = numpy.arange(k)
        placed = which[local]
        moving = placed >= 0
        going, place = samples[moving], placed[moving]
        child = 2 * place + (features[going, best_feature[place]] > best_threshold[place])  # left, then right
        order = numpy.argsort(child, kind="stable")
        samples, sizes, ids = going[order], numpy.bincount(child, minlength=2 * k), nodes + numpy.arange(2 * k)
        nodes += 2 * k
    return feature[:nodes], threshold[:nodes], left[:nodes], right[:nodes], value[:nodes]


def _predict(tree: tuple[numpy.ndarray, ...], features: numpy.ndarray) -> numpy.ndarray:
    feature, threshold, left, right, value = tree
    node = numpy.zeros(len(features), dtype=numpy.int64)
    rows = numpy.arange(len(features))
    while True:
        inner = feature[node] != LEAF
        if not inner.any():
            return value[node]
        at = node[inner]
        goes_left = features[rows[inner], feature[at]] <= threshold[at]
        node[inner] = numpy.where(goes_left, left[at], right[at])
