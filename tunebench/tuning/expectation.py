"""What each unmeasured point is expected to score: an analytic prior, corrected by the points measured so far.

Scores are natural logs of a higher-is-better figure (tokens/s, or the inverse of J/token or $/token), so a
factor's effect is additive. The prior counts passes of work per token (forward 1, weight and input gradients
2 for full fine-tuning, about 1 for LoRA's frozen base, 1 more to recompute checkpointed activations) and the
loss of efficiency of small micro-batches; the measured points then fit each factor's real effect (ridge
regression toward the prior, so one measurement moves a factor only part of the way).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from tunebench.tuning.space import CATEGORICAL, Point

logger = logging.getLogger(__name__)

# Tokens per micro-batch at which a device runs at half its best efficiency (GPUs need big matrices; CPUs less).
HALF_EFFICIENCY_TOKENS = {"cuda": 1024, "cpu": 64}
RIDGE = 0.1  # penalty of a factor's correction: a small pull toward the prior where measurements are few


def prior(point: Point, max_seq_len: int, device_type: str) -> float:
    """The analytic prior's score (log relative tokens/s)."""
    passes = (3.0 if point.peft == "none" else 2.1) + (1.0 if point.checkpointing else 0.0)
    tokens = point.micro_batch * max_seq_len
    efficiency = tokens / (tokens + HALF_EFFICIENCY_TOKENS[device_type])
    speedups = (1.03 if "fused" in point.optim else 1.0) * (1.05 if point.compile else 1.0) * \
        (1.05 if point.liger else 1.0)
    return math.log(efficiency * speedups / passes)


def features(point: Point) -> list[str | tuple[str, float]]:
    """Categorical levels, and numeric (name, value) features, of the correction model."""
    f = point.factors()
    return [f"{k}={f[k]}" for k in CATEGORICAL] + [("log2_micro_batch", math.log2(point.micro_batch))]


def expected(points: list[Point], priors: dict[Point, float], measured: dict[Point, float]) -> dict[Point, float]:
    """Every point's expected score: its measurement where there is one, else prior + fitted correction."""
    if not measured:
        return dict(priors)
    levels = sorted({x if isinstance(x, str) else x[0] for p in points for x in features(p)})
    index = {name: i for i, name in enumerate(levels)}

    def row(point: Point) -> np.ndarray:
        v = np.zeros(len(levels))
        for x in features(point):
            if isinstance(x, str):
                v[index[x]] = 1.0
            else:
                v[index[x[0]]] = x[1]
        return v

    known = list(measured)
    x = np.array([row(p) for p in known])
    y = np.array([measured[p] - priors[p] for p in known])
    x_mean, y_mean = x.mean(axis=0), y.mean()  # the intercept (the prior's unknown scale) is not penalised
    xc, yc = x - x_mean, y - y_mean
    beta = np.linalg.solve(xc.T @ xc + RIDGE * np.eye(len(levels)), xc.T @ yc)
    out = {}
    for p in points:
        out[p] = measured[p] if p in measured else priors[p] + y_mean + float((row(p) - x_mean) @ beta)
    return out
