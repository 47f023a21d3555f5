"""translator.py's translate_ids, one mode at a time: the plan of its rows (plan.py: which
sentence each row is, sampling's draws, the TF1 protocol's empty sources, the forced
prefixes padded, the rows regrouped per sentence) and the Translator's steps that fill it
in (the batches, the decoder of each mode, a batch's inputs), each alone with real numbers;
and the output matrix its decoders read, transposed once (embeddings.pin_transposed)."""

import doctest

import numpy as np
import pytest
import tensorflow as tf

from helpers import tiny_model
from transformer_tf2.config import hparams
from transformer_tf2.decoding import plan as plan_module
from transformer_tf2.decoding.greedy_search import decoder_signature
from transformer_tf2.decoding.plan import (
    Plan,
    draw_ids,
    forced_prefixes,
    plan_rows,
    prefix_inputs,
    regroup,
)
from transformer_tf2.decoding.translator import Translator

V = 23
SOURCES = [[5, 6, 7], [], [8], [9, 10, 11, 12], []]


def settings(**kw):
    values = {"max_len_extra": 6, "decode_streams": 1, "eval_batch_size": 2, **kw}
    return hparams.apply(hparams.Hparams(), values)


@pytest.fixture(scope="module")
def model():
    return tiny_model(V, V, seed=3)


def test_the_plan_modules_examples_run():
    result = doctest.testmod(plan_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


# ---------------------------------------------------------------------------------------
# The rows
# ---------------------------------------------------------------------------------------
def test_rows_skip_empty_sources_unless_a_width_is_given():
    assert plan_rows(SOURCES) == [0, 2, 3]
    assert plan_rows(SOURCES, width=6) == [0, 1, 2, 3, 4]  # the TF1 protocol: </S> alone
    assert plan_rows([[], []]) == []
    # numpy sources count by their length, never by their truth value
    assert plan_rows([np.array([0]), np.zeros(0, np.int32)]) == [0]


def test_a_sentences_draws_lie_side_by_side():
    assert plan_rows(SOURCES, draws=3) == [0, 0, 0, 2, 2, 2, 3, 3, 3]
    assert plan_rows(SOURCES, width=6, draws=2) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_draw_ids_are_sentence_times_n_plus_j_in_any_batch():
    sentences = plan_rows(SOURCES, draws=3)  # [0, 0, 0, 2, 2, 2, 3, 3, 3]
    got = draw_ids(sentences, [8, 3, 0, 4, 5, 1], 3)
    assert got.dtype == np.int32
    assert got.tolist() == [11, 6, 0, 7, 8, 1]
    # every row's draw id, whatever batches the rows are cut into: i * 3 + j
    every = np.concatenate(
        [draw_ids(sentences, idx, 3) for idx in ([6, 2], [0, 7, 1], [3, 4, 5, 8])]
    )
    assert sorted(every.tolist()) == [0, 1, 2, 6, 7, 8, 9, 10, 11]
    assert draw_ids([4], [0], 1).tolist() == [4]  # one draw: the sentence's index


# ---------------------------------------------------------------------------------------
# The prefixes
# ---------------------------------------------------------------------------------------
def test_prefixes_count_only_where_a_sentence_has_one():
    assert forced_prefixes(None) is None
    assert forced_prefixes([[], [], np.zeros(0, np.int32)]) is None
    some = [[], [7], []]
    assert forced_prefixes(some) is some


def test_prefix_inputs_are_padded_to_the_longest_plus_one_column():
    prefixes = [[9, 10, 11], None, [], [4]]
    tokens, lengths = prefix_inputs(prefixes, [0, 0, 1, 2, 3], [4, 0, 2, 3])
    assert tokens.dtype == np.int32 and lengths.dtype == np.int32
    np.testing.assert_array_equal(
        tokens, [[4, 0, 0, 0], [9, 10, 11, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    )
    assert lengths.tolist() == [1, 3, 0, 0]
    # rows without a prefix only: one PAD column
    tokens, lengths = prefix_inputs(prefixes, [1, 2], [1, 0])
    assert tokens.tolist() == [[0], [0]] and lengths.tolist() == [0, 0]


def test_a_plans_inputs_are_the_draws_then_the_prefix():
    sentences = [0, 0, 2, 2]
    prefixes = [[9, 10], None, [4]]
    assert Plan(sentences, 2, []).inputs([0, 1]) == []
    draws, tokens, lengths = Plan(sentences, 2, [], None, prefixes, sampling=True).inputs([3, 0])
    assert draws.tolist() == [5, 0]
    assert tokens.tolist() == [[4, 0, 0], [9, 10, 0]] and lengths.tolist() == [1, 2]
    (only,) = Plan(sentences, 2, [], sampling=True).inputs([1, 2])
    assert only.tolist() == [1, 4]
    tokens, lengths = Plan([0, 2], 1, [], None, prefixes).inputs([1])
    assert tokens.tolist() == [[4, 0]] and lengths.tolist() == [1]


# ---------------------------------------------------------------------------------------
# The regrouping
# ---------------------------------------------------------------------------------------
def test_one_draw_gives_each_sentence_its_rows_hypotheses_and_none_for_the_rest():
    sentences = [0, 2, 3]
    ids = np.arange(3 * 2 * 4, dtype=np.int32).reshape(3, 2, 4)  # (N, n, L): 2 best
    scores = np.array([[-1.0, -2.0], [-3.0, -4.0], [-5.0, -6.0]], np.float32)
    # two batches, the second first (as streams return them, largest first)
    decoded = [([2, 0], (ids[:2], scores[:2])), ([1], (ids[2:], scores[2:]))]
    out = regroup(decoded, sentences, 1, 5)
    assert out[1] is None and out[4] is None
    np.testing.assert_array_equal(out[3][0], ids[0])
    np.testing.assert_array_equal(out[0][0], ids[1])
    np.testing.assert_array_equal(out[2][0], ids[2])
    assert out[3][1].tolist() == [-1.0, -2.0] and out[2][1].tolist() == [-5.0, -6.0]
    assert regroup([], [], 1, 2) == [None, None]


def test_draws_regroup_into_an_n_by_longest_array_in_draw_order():
    sentences = [0, 0, 0, 2, 2, 2]
    # rows decoded in batches of other lengths (N, 1, L), out of order
    decoded = [
        ([4, 1], (np.array([[[21, 22, 3, 0, 0]], [[11, 12, 13, 14, 3]]]), np.zeros((2, 1)))),
        ([2, 0, 5], (np.array([[[15, 3]], [[10, 3]], [[23, 3]]]), np.zeros((3, 1)))),
        ([3], (np.array([[[20, 3, 0]]]), np.zeros((1, 1)))),
    ]
    out = regroup(decoded, sentences, 3, 3)
    assert out[1] is None
    ids, scores = out[0]
    assert ids.dtype == np.int32 and scores.dtype == np.float32
    np.testing.assert_array_equal(ids, [[10, 3, 0, 0, 0], [11, 12, 13, 14, 3], [15, 3, 0, 0, 0]])
    assert scores.tolist() == [0.0, 0.0, 0.0]
    ids, _ = out[2]  # its longest row: 5 wide, from the first batch
    np.testing.assert_array_equal(ids, [[20, 3, 0, 0, 0], [21, 22, 3, 0, 0], [23, 3, 0, 0, 0]])


# ---------------------------------------------------------------------------------------
# The Translator's steps: the plan of each mode, its decoder, a batch decoded
# ---------------------------------------------------------------------------------------
def test_the_plan_batches_the_rows_sources_and_pads_to_the_width(model):
    plan = Translator(model, None, settings()).plan(SOURCES)
    assert plan.sentences == [0, 2, 3] and plan.draws == 1 and not plan.sampling
    assert plan.prefixes is None
    # rows sorted by length, 2 a batch, each source with </S> (3)
    (idx0, b0), (idx1, b1) = plan.batches
    assert idx0.tolist() == [1, 0] and b0.tolist() == [[8, 3, 0, 0], [5, 6, 7, 3]]
    assert idx1.tolist() == [2] and b1.tolist() == [[9, 10, 11, 12, 3]]
    wide = Translator(model, None, settings(eval_batch_size=8)).plan(SOURCES, width=7)
    (idx, batch), *rest = wide.batches
    assert rest == [] and batch.shape == (5, 7)
    assert sorted(idx.tolist()) == [0, 1, 2, 3, 4]
    assert batch[idx.tolist().index(1)].tolist() == [3, 0, 0, 0, 0, 0, 0]  # </S> alone


def test_the_plan_of_sampling_draws_n_rows_a_sentence(model):
    t = Translator(model, None, settings(sampling_topk=0, seed=1, eval_batch_size=4))
    plan = t.plan(SOURCES, n=2)
    assert plan.sampling and plan.draws == 2 and plan.sentences == [0, 0, 2, 2, 3, 3]
    rows = sorted(r for idx, _ in plan.batches for r in idx.tolist())
    assert rows == [0, 1, 2, 3, 4, 5]
    for idx, batch in plan.batches:  # each row holds its sentence's source
        for r, src in zip(idx, batch):
            s = SOURCES[plan.sentences[r]]
            assert src[: len(s) + 1].tolist() == [*s, 3]
    # without sampling n asks for no draws: greedy's one row a sentence
    assert Translator(model, None, settings()).plan(SOURCES, n=3).sentences == [0, 2, 3]


def test_each_mode_decodes_with_its_own_compiled_search(model):
    greedy = Translator(model, None, settings())
    assert greedy.plan(SOURCES).decode is greedy.decode
    assert greedy.plan(SOURCES, n=3).decode is greedy.decode  # greedy has one best
    assert greedy.plan(SOURCES, prefixes=[[]] * 5).decode is greedy.decode  # all empty
    prefixed = greedy.plan(SOURCES, prefixes=[[4], [], [], [], []])
    assert prefixed.decode is not greedy.decode and prefixed.prefixes == [[4], [], [], [], []]
    assert greedy.plan(SOURCES, prefixes=[[5]] * 5).decode is prefixed.decode  # built once
    beam = Translator(model, None, settings(beam_size=3))
    nbest = beam.plan(SOURCES, n=3).decode
    assert nbest is not beam.decode and beam.plan(SOURCES, n=2).decode not in (nbest, beam.decode)
    assert beam.plan(SOURCES, n=3).decode is nbest
    assert set(beam._compiled) == {"prefix=False,n=3", "prefix=False,n=2"}


def test_a_batch_is_decoded_with_its_rows_inputs(model):
    """_decode_rows alone: the plan's decoder gets the batch, the step budget and the
    rows' inputs as tensors; its result comes back as (ids (N, n, L), scores (N, n))."""
    seen = []

    def decode(src, extra, *inputs):
        seen.append((src.numpy().tolist(), int(extra), [x.numpy().tolist() for x in inputs]))
        return tf.constant([[4, 3], [5, 3]], tf.int32)

    t = Translator(model, None, settings(sampling_topk=0, seed=1))
    plan = Plan([0, 0, 2, 2], 2, [], decode, [[9, 10], None, [4]], sampling=True)
    ids, scores = t._decode_rows(plan, [3, 0], np.array([[8, 3], [5, 3]], np.int32))
    assert seen == [([[8, 3], [5, 3]], 6, [[5, 0], [[4, 0, 0], [9, 10, 0]], [1, 2]])]
    assert ids.tolist() == [[[4, 3]], [[5, 3]]] and scores.tolist() == [[0.0], [0.0]]


def test_a_model_with_document_memory_refuses_a_prefix_before_decoding():
    from helpers import relative_model

    model = relative_model("xl", seed=11, memory_sentences=1)
    t = Translator(model, None, settings())
    with pytest.raises(hparams.UserError, match="a target prefix is not for a model with"):
        t._translate_documents([[5, 6]], False, None, [[4]])


# ---------------------------------------------------------------------------------------
# The output matrix, transposed once
# ---------------------------------------------------------------------------------------
def output_transposes(fn, model) -> int:
    """How many ops of fn's traced graph (outside the loop's body) transpose the output
    matrix (V8, d_model) to (d_model, V8)."""
    shape = [model.d_model, model.tgt_embedding.rows]
    graph = fn.get_concrete_function(*decoder_signature()).graph
    return sum(
        op.type == "Transpose" and op.outputs[0].shape.as_list() == shape
        for op in graph.get_operations()
    )


def decoded(outs):
    return [None if o is None else (o[0].tolist(), o[1].tolist()) for o in outs]


@pytest.mark.parametrize("beam", [1, 3])
def test_a_translator_transposes_the_output_matrix_once_with_the_same_outputs(beam):
    model = tiny_model(V, V, seed=5)
    hp = settings(beam_size=beam)
    before = Translator(model, None, hp)
    model.tgt_embedding.__dict__.pop("_pinned")  # the decoder of before: a transpose a call
    unpinned = before._decoder(prefix=False)
    assert output_transposes(unpinned, model) == 1
    before.decode = unpinned
    want = before.translate_ids(SOURCES)
    t = Translator(model, None, hp)
    assert output_transposes(t.decode, model) == 0
    assert decoded(t.translate_ids(SOURCES)) == decoded(want)  # bit for bit


def test_pinning_adds_no_weight_and_nothing_to_a_checkpoint(tmp_path):
    model = tiny_model(V, V, seed=5)
    names = [v.path for v in model.weights]
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "before"))
    model.pin_output()
    model.pin_output()  # a second pin refreshes the same variable
    assert [v.path for v in model.weights] == names
    after = tf.train.Checkpoint(model=model).write(str(tmp_path / "after"))
    assert tf.train.list_variables(after) == tf.train.list_variables(path)


def test_a_dev_translator_decodes_the_weights_its_model_has_now():
    """The decoders of a model in training read the pinned matrix of the weights of the
    decoding, not of the translator's making: DevTranslator pins before each decoding."""
    from transformer_tf2.evaluation.dev import DevTranslator

    model, other = tiny_model(V, V, seed=5), tiny_model(V, V, seed=6)
    dev = DevTranslator(model, None, settings())
    before = decoded(dev.translate_ids(SOURCES))
    for w, o in zip(model.weights, other.weights, strict=True):
        w.assign(o)
    after = decoded(dev.translate_ids(SOURCES))
    assert after != before
    assert after == decoded(Translator(other, None, settings()).translate_ids(SOURCES))
