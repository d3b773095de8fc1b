"""The synthetic corpora: the Markov chain's floor is exactly ln k (checked against the chain's own structure and
an empirical estimate), the rows obey it, and both corpora give the trainer identical batches but for the ids."""

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunebench.experiment.arguments import DataArguments
from tunebench.experiment.corpus import entropy_floor, markov_chain, markov_rows, ordinary_ids, synthetic_rows
from tunebench.experiment.data import synthetic_lengths
from tunebench.experiment.models import build_tokenizer
from tunebench.experiment.ranges import range_problems


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer("preset:llama-tiny")


@settings(max_examples=60, deadline=None)
@given(states=st.integers(1, 300), data=st.data(), seed=st.integers(0, 2**32 - 10))
def test_every_state_has_k_distinct_successors_and_k_predecessors(states, data, seed):
    """k-regular both ways: the transition matrix is doubly stochastic, so the uniform start stays the law of every
    position and each predicted token is uniform over exactly k ids: the floor is ln k."""
    branching = data.draw(st.integers(1, min(states, 256)))
    chain = markov_chain(states, branching, 3, 259, seed)
    size = min(states, 256)
    assert len(chain.successors) == len(chain.ids) == size == len(set(chain.ids))
    assert all(3 <= i < 259 for i in chain.ids)  # ordinary ids only: never pad, bos or eos
    assert all(len(set(s)) == branching for s in chain.successors)
    indegree = Counter(t for s in chain.successors for t in s)
    assert set(indegree.values()) == {branching} and len(indegree) == size
    assert chain.floor_nats() == math.log(branching)


def test_walks_follow_the_chain_and_their_entropy_is_the_floor():
    """The empirical conditional entropy of 200 000 transitions is ln 2 to within its sampling error."""
    chain = markov_chain(32, 2, 3, 259, seed=5)
    rows = markov_rows(chain, [500] * 400, seed=5)
    successors = {chain.ids[i]: {chain.ids[j] for j in s} for i, s in enumerate(chain.successors)}
    pairs = Counter((a, b) for row in rows for a, b in zip(row[:-1], row[1:], strict=True))
    assert all(b in successors[a] for a, b in pairs)
    starts = Counter(a for row in rows for a in row[:-1])
    total = sum(pairs.values())
    estimate = -sum(n / total * math.log(n / starts[a]) for (a, _), n in pairs.items())
    assert abs(estimate - math.log(2)) < 0.002
    assert markov_rows(chain, [7, 3], seed=5) == markov_rows(chain, [7, 3], seed=5)
    assert [len(r) for r in markov_rows(chain, [7, 1, 3], seed=6)] == [7, 1, 3]


def test_the_floor_of_each_corpus(tokenizer):
    first, end = ordinary_ids(tokenizer)
    assert (first, end) == (3, 259)
    assert entropy_floor(DataArguments(), tokenizer) == (math.log(2), "")
    assert entropy_floor(DataArguments(synthetic_markov_branching=5), tokenizer) == (math.log(5), "")
    assert entropy_floor(DataArguments(synthetic_corpus="uniform"), tokenizer) == (math.log(256), "")
    floor, why = entropy_floor(DataArguments(training_data_path="data/mine.jsonl"), tokenizer)
    assert floor is None and "unknown" in why and "loss_target_nats" in why
    # more states than the tokenizer has ids: the chain uses them all, the floor is still ln k
    assert entropy_floor(DataArguments(synthetic_markov_states=10_000, synthetic_markov_branching=3), tokenizer)[0] \
        == math.log(3)


def test_the_uniform_corpus_keeps_its_rows_and_the_markov_one_its_lengths(tokenizer):
    lengths = synthetic_lengths(20, 64, 0, "uniform", 42)
    uniform = synthetic_rows(DataArguments(synthetic_corpus="uniform"), tokenizer, lengths, 42)
    import numpy as np

    rng = np.random.default_rng(43)  # the draws of the corpus before issue 45, kept for `uniform`
    assert uniform == [rng.integers(3, 259, size=n).tolist() for n in lengths]
    markov = synthetic_rows(DataArguments(), tokenizer, lengths, 42)
    assert [len(r) for r in markov] == lengths and len({i for r in markov for i in r}) <= 32


def test_more_successors_than_states_is_refused_before_anything_runs():
    groups = {"data": DataArguments}
    problems = range_problems({"data": {"synthetic_markov_states": 4, "synthetic_markov_branching": 5}}, groups)
    assert "synthetic_markov_branching" in problems and "4" in problems["synthetic_markov_branching"]
    assert range_problems({"data": {"synthetic_markov_states": 5, "synthetic_markov_branching": 5}}, groups) == {}
    with pytest.raises(ValueError, match="synthetic_markov_branching"):
        markov_chain(4, 5, 3, 259, 0)


def _batches(tokenizer, corpus: str, tmp_path, **training) -> list[dict]:
    """The first batches the real trainer feeds the model, from a corpus of uniform row lengths."""
    import datasets
    from trl import SFTConfig

    from tunebench.experiment.models import load_model
    from tunebench.experiment.trainer import BenchSFTTrainer

    data_args = DataArguments(max_seq_len=48, synthetic_num_samples=24, synthetic_corpus=corpus)
    lengths = synthetic_lengths(24, 48, 8, "uniform", 42)
    dataset = datasets.Dataset.from_dict({"input_ids": synthetic_rows(data_args, tokenizer, lengths, 42)})
    config = SFTConfig(output_dir=str(tmp_path / corpus), use_cpu=True, max_length=48, per_device_train_batch_size=4,
                       report_to="none", seed=42, gradient_checkpointing=False, dataset_num_proc=None, **training)
    trainer = BenchSFTTrainer(model=load_model("preset:llama-tiny", "float32"), args=config, train_dataset=dataset,
                              processing_class=tokenizer)
    return [batch for _, batch in zip(range(4), trainer.get_train_dataloader(), strict=False)]


@pytest.mark.parametrize("training", [{}, {"packing": True, "padding_free": True},
                                      {"packing": True, "packing_strategy": "wrapped", "padding_free": False}],
                         ids=["padded", "packed-bfd", "packed-wrapped"])
def test_both_corpora_give_the_trainer_the_same_batches_but_for_the_ids(tokenizer, tmp_path, training):
    """Same shapes, masks, positions and loss positions: the step's work (and so its throughput) is the same."""
    markov, uniform = (_batches(tokenizer, corpus, tmp_path, **training) for corpus in ("markov", "uniform"))
    assert len(markov) == len(uniform) == 4
    for a, b in zip(markov, uniform, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if key == "input_ids":
                assert a[key].shape == b[key].shape and not a[key].equal(b[key])
            elif key == "labels":
                assert a[key].eq(-100).equal(b[key].eq(-100))
            elif hasattr(a[key], "shape"):
                assert a[key].equal(b[key]), key
            else:
                assert a[key] == b[key], key
