"""The synthetic corpora: token ids drawn by a process whose entropy rate is known, so the loss has a floor.

`markov` (the default): every row is a walk on a sparse random Markov chain over `synthetic_markov_states` of the
tokenizer's ordinary ids. Each state has exactly `synthetic_markov_branching` (k) successors, each taken with
probability 1/k, and exactly k predecessors (the successors of state i are tau[(rho[i] + c_m) mod S] for two
random permutations rho, tau and k distinct offsets c_m), so the transition matrix is doubly stochastic: the
uniform start stays the distribution of every position. Every predicted token (a row's second onwards) is then
uniform over k ids given the token before it, whatever came earlier: the best loss any model can reach is
exactly ln k nats per token. A random-init model starts near ln(vocabulary) and can see the structure from the
first step: one token decides the next.

Why these defaults (32 states, 2 successors; floor ln 2 = 0.693): a walk on few states is learnt in the steps a
benchmark runs at today's learning rates (docs/evidence/loss-parity-cpu.md: llama-small fully fine-tuned at
2e-4 goes from 7.70 to 3.50 nats in 30 steps, 6.03 on the uniform corpus; llama-tiny in the CPU scenario set
reaches the default target, a fifth of the way to the floor, at step 11 of 20), while every transition is still
seen thousands of times a run.

`uniform`: ids uniform over the tokenizer's ordinary ids (the corpus before issue 45, for pure throughput rows):
its floor is ln(that count), the loss a model reaches by learning which ids occur and nothing else.

Both corpora fill the same row lengths with ids from the same range of ordinary ids (never pad, bos or eos), so
shapes, padding and packing are those of the same lengths: only the ids differ.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

logger = logging.getLogger(__name__)

CORPORA = ("markov", "uniform")
# Seed offsets of the corpus's random draws (the lengths use the seed itself): separate streams, so changing
# one part (the chain's size, the lengths) leaves the others' draws alone.
_UNIFORM_IDS, _CHAIN, _STATE_IDS, _WALKS = 1, 2, 3, 4


@dataclass(frozen=True)
class MarkovChain:
    """A k-regular random chain over `len(ids)` states; `ids[state]` is the token id of a state."""

    successors: list[list[int]]  # [state][m]: the m-th successor state
    ids: list[int]

    @property
    def branching(self) -> int:
        return len(self.successors[0])

    def floor_nats(self) -> float:
        return math.log(self.branching)


def ordinary_ids(tokenizer) -> tuple[int, int]:
    """[first, end) of the ids a synthetic row may hold: everything above the special tokens (pad, bos, eos)."""
    first = max(tokenizer.all_special_ids or [0]) + 1
    return first, len(tokenizer)


def markov_chain(states: int, branching: int, first_id: int, end_id: int, seed: int) -> MarkovChain:
    """The chain of `states` states (at most end_id - first_id: the ids there are) with `branching` successors."""
    import numpy as np

    available = end_id - first_id
    states = min(states, available)
    if not 1 <= branching <= states:
        raise ValueError(f"synthetic_markov_branching {branching} needs 1 ≤ k ≤ the chain's states ({states}: "
                         f"synthetic_markov_states, at most the tokenizer's {available} ordinary ids)")
    rng = np.random.default_rng(seed + _CHAIN)
    rho, tau = rng.permutation(states), rng.permutation(states)
    offsets = rng.choice(states, size=branching, replace=False)
    successors = np.stack([tau[(rho + offset) % states] for offset in offsets], axis=1)
    ids = first_id + np.random.default_rng(seed + _STATE_IDS).choice(available, size=states, replace=False)
    return MarkovChain(successors.tolist(), ids.tolist())


def markov_rows(chain: MarkovChain, lengths: list[int], seed: int) -> list[list[int]]:
    """One walk per length, from a uniform start (the stationary distribution of a doubly stochastic chain)."""
    import numpy as np

    if not lengths:
        return []
    rng = np.random.default_rng(seed + _WALKS)
    successors, ids = np.asarray(chain.successors), np.asarray(chain.ids)
    rows, longest = len(lengths), max(lengths)
    choices = rng.integers(0, chain.branching, size=(rows, longest))
    walks = np.empty((rows, longest), dtype=np.int64)
    walks[:, 0] = rng.integers(0, len(ids), size=rows)
    for position in range(1, longest):  # all rows at once: one vectorised step per position
        walks[:, position] = successors[walks[:, position - 1], choices[:, position]]
    tokens = ids[walks]
    return [tokens[i, :n].tolist() for i, n in enumerate(lengths)]


def uniform_rows(lengths: list[int], first_id: int, end_id: int, seed: int) -> list[list[int]]:
    """Ids uniform over [first_id, end_id): the same draws as before the Markov corpus existed."""
    import numpy as np

    rng = np.random.default_rng(seed + _UNIFORM_IDS)
    return [rng.integers(first_id, end_id, size=n).tolist() for n in lengths]


def synthetic_rows(data_args, tokenizer, lengths: list[int], seed: int) -> list[list[int]]:
    """The rows of the experiment's synthetic corpus (`synthetic_corpus`), one per length."""
    first_id, end_id = ordinary_ids(tokenizer)
    if data_args.synthetic_corpus == "uniform":
        return uniform_rows(lengths, first_id, end_id, seed)
    if data_args.synthetic_corpus != "markov":
        raise ValueError(f"synthetic_corpus {data_args.synthetic_corpus!r}: use one of {', '.join(CORPORA)}")
    chain = markov_chain(data_args.synthetic_markov_states, data_args.synthetic_markov_branching, first_id, end_id,
                         seed)
    logger.info("synthetic corpus: Markov chain over %d ids, %d successors each (floor %.4f nats/token)",
                len(chain.ids), chain.branching, chain.floor_nats())
    return markov_rows(chain, lengths, seed)


def entropy_floor(data_args, tokenizer) -> tuple[float | None, str]:
    """(the data's entropy rate in nats per predicted token, why it is unknown): the lowest loss any model can
    reach on it. Known for the synthetic corpora only; a user's own data has one nobody can compute."""
    if data_args.training_data_path != "synthetic":
        return None, "your own data: its entropy rate is unknown (give loss_target_nats to get time to target)"
    first_id, end_id = ordinary_ids(tokenizer)
    if data_args.synthetic_corpus == "uniform":
        return math.log(end_id - first_id), ""
    states = min(data_args.synthetic_markov_states, end_id - first_id)
    return math.log(min(data_args.synthetic_markov_branching, states)), ""
