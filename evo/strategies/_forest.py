"""A small random forest regressor over knob positions, in numpy: the surrogate strategy's cost model.

Breiman's random forest as scikit-learn's ``RandomForestRegressor`` builds it by default (bootstrap
samples, every feature tried at every split, squared-error splits, trees grown until leaves are pure or
``min_leaf`` small), specialised to what a genome is: a few small integer features (a knob's value
position), so that one ``bincount`` scores every split of every feature of a node at once. Written
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
    offsets = numpy.arange(features.shape[1]) * levels
    feature, threshold, left, right, value = [], [], [], [], []
    stack = [(numpy.arange(len(targets)), None, False)]  # (samples, parent node, is the parent's right child)
    while stack:
        samples, parent, is_right = stack.pop()
        node = len(value)
        feature.append(LEAF), threshold.append(0), left.append(LEAF), right.append(LEAF)
        here = targets[samples]
        value.append(float(here.sum()) / len(here))
        if parent is not None:
            (right if is_right else left)[parent] = node
        if len(here) < 2 * min_leaf:
            continue
        split = _best_split(features[samples], here, offsets, levels, min_leaf)
        if split is None:
            continue
        best_feature, best_threshold = split
        feature[node], threshold[node] = best_feature, best_threshold
        goes_left = features[samples, best_feature] <= best_threshold
        stack.append((samples[~goes_left], node, True))
        stack.append((samples[goes_left], node, False))
    return tuple(numpy.array(a) for a in (feature, threshold, left, right, value))


def _best_split(features: numpy.ndarray, targets: numpy.ndarray, offsets: numpy.ndarray, levels: int, min_leaf: int):
    """(feature, threshold) of the split that lowers the squared error most, or None (pure or too small)."""
    count, knobs = len(targets), len(offsets)
    if targets.max() == targets.min():
        return None
    cells = (offsets + features).ravel()
    counts = numpy.bincount(cells, minlength=knobs * levels).reshape(knobs, levels)
    sums = numpy.bincount(cells, weights=numpy.repeat(targets, knobs), minlength=knobs * levels).reshape(knobs, levels)
    left_n, left_sum = numpy.cumsum(counts, axis=1)[:, :-1], numpy.cumsum(sums, axis=1)[:, :-1]
    right_n, right_sum = count - left_n, sums.sum(axis=1, keepdims=True) - left_sum
    valid = (left_n >= min_leaf) & (right_n >= min_leaf) & (counts[:, :-1] > 0)
    if not valid.any():
        return None
    with numpy.errstate(divide="ignore", invalid="ignore"):
        gain = numpy.where(valid, left_sum ** 2 / left_n + right_sum ** 2 / right_n, -numpy.inf)
    best = int(numpy.argmax(gain))
    if gain.flat[best] <= targets.sum() ** 2 / count + 1e-12:
        return None
    return divmod(best, levels - 1)


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
