"""The Trainer (trainer.py) on its own, one batch at a time: what an update reports and
does (the label-smoothed loss 5.4, the gradient norm, Adam's first step 5.3), a skipped
update, gradient accumulation's flush and drop (accumulation.py), and the run's
checkpointed state (run_state.py): a save and a restore, and what a stop would lose.
The whole loop around it is tested in test_train_eval.py, test_budget.py and others."""

import keras
import numpy as np
import tensorflow as tf

from helpers import step_ops, tiny
from transformer_tf2.data import data_load
from transformer_tf2.decoding.translator import Translator
from transformer_tf2.evaluation.dev import Dev
from transformer_tf2.kernels import fast_ops, native
from transformer_tf2.models import variants
from transformer_tf2.models.model import Transformer
from transformer_tf2.training.trainer import Trainer
from transformer_tf2.utils import devices


def trainer_for(demo_prepro, tmp_path, **kw) -> tuple[Trainer, list]:
    """A Trainer of the tiny demo run with ``kw``, seeded, and its first epoch's batches."""
    hp = tiny(str(tmp_path), data_dir=demo_prepro.data_dir, prepro_dir=demo_prepro.prepro_dir, **kw)
    tok = data_load.load_tokenizer(hp)
    strategy, precision = devices.setup_devices(hp)
    keras.utils.set_random_seed(hp.seed)
    data = data_load.TrainData(hp)
    batches = [data_load.build_batch(data.corpus, idx) for idx in data.batches(0)]
    return Trainer(hp, tok, strategy, precision), batches


def values(variables) -> list[np.ndarray]:
    return [np.array(v) for v in variables]


def reference_sums(model, batch, epsilon: float, kernels=None):
    """The batch's label-smoothed loss, cross-entropy, target tokens and correct tokens,
    in numpy from the model's logits: q = (1 - eps) one_hot(y) + eps / V (5.4); and the
    loss's gradients, per target token, from a tape of its own. The model runs under
    ``kernels`` (the trainer's: the same LayerNorm kernels as its step)."""
    src, dec_in, labels = batch
    variables = model.trainable_variables
    forward = fast_ops.under(kernels or fast_ops.Kernels(), model.forward)
    with tf.GradientTape() as tape:
        logits = model.logits(forward(src, dec_in, training=True))
        real = tf.cast(tf.not_equal(labels, data_load.PAD_ID), tf.float32)
        vocab = logits.shape[-1]
        q = (1 - epsilon) * tf.one_hot(labels, vocab) + epsilon / vocab
        logp = tf.nn.log_softmax(logits)
        loss = tf.reduce_sum(-tf.reduce_sum(q * logp, -1) * real) / tf.reduce_sum(real)
    grads = tape.gradient(loss, variables)
    logp, labels, real = np.array(logp, np.float64), np.array(labels), np.array(real)
    q = np.array(q, np.float64)
    nll = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    correct = (logp.argmax(-1) == labels).astype(np.float64)
    sums = (
        float((-(q * logp).sum(-1) * real).sum()),
        float((nll * real).sum()),
        float(real.sum()),
        float((correct * real).sum()),
    )
    return sums, grads


def test_one_update_reports_its_batch_and_takes_adams_first_step(demo_prepro, tmp_path):
    """No dropout: the StepStats are the batch's sums computed apart, the gradient norm is
    the per-token loss's, and Adam's first step moves each weight by lr * g / (|g| + eps')
    (bias-corrected moments m = g, v = g^2), i.e. by lr where |g| is well above eps."""
    trainer, batches = trainer_for(demo_prepro, tmp_path, dropout_rate=0.0, clip_norm=0.0)
    batch, hp = batches[0], trainer.hp
    (loss, nll, tokens, correct), grads = reference_sums(
        trainer.model, batch, hp.label_smoothing, trainer.kernels
    )
    before = values(trainer.model.trainable_variables)
    lr = float(trainer.schedule(0))
    stats, updated = trainer.train_batch(*batch)
    assert updated and trainer.step == 1 and stats.skipped == 0.0
    assert stats.tokens == tokens == np.sum(batch[2] != data_load.PAD_ID)
    assert stats.correct == correct
    np.testing.assert_allclose([stats.loss_sum, stats.nll_sum], [loss, nll], rtol=1e-5)
    norm = float(tf.linalg.global_norm([g for g in grads if g is not None]))
    np.testing.assert_allclose(stats.grad_norm, norm, rtol=1e-4)
    moved = 0
    for w0, w1, g in zip(before, values(trainer.model.trainable_variables), grads):
        if g is None:
            continue
        g = tf.convert_to_tensor(g).numpy()
        big = np.abs(g) > 1e-4
        np.testing.assert_allclose((w0 - w1)[big], lr * np.sign(g[big]), rtol=1e-3)
        moved += int(big.sum())
    assert moved > 1000


def test_a_nonfinite_loss_changes_no_variable(demo_prepro, tmp_path):
    """A NaN loss: the update is skipped everywhere: no weight, optimizer slot or step
    count moves, and the StepStats say so."""
    trainer, batches = trainer_for(demo_prepro, tmp_path)
    poison = tf.Variable(0.0)

    class Poisoned(variants.Training):  # once poison is set, a NaN loss
        def extra_loss(self, model, extras):
            return tf.where(poison > 0, np.nan, 0.0)

    trainer.hooks = Poisoned()  # before the step is traced
    trainer.train_batch(*batches[0])
    poison.assign(1.0)
    optimizer_state = trainer.adam.variables
    before = values(trainer.model.trainable_variables), values(optimizer_state)
    stats, updated = trainer.train_batch(*batches[1])
    assert (stats.skipped, updated, trainer.step) == (1.0, False, 1)
    for got, want in zip(values(trainer.model.trainable_variables), before[0]):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(values(optimizer_state), before[1]):
        np.testing.assert_array_equal(got, want)


def test_accumulation_flushes_and_drops_a_partial_sum(demo_prepro, tmp_path):
    """accum_steps=3: two batches update nothing; drop_partial forgets them and puts the
    data position and the dropout random state back; flush applies a partial sum."""
    trainer, batches = trainer_for(demo_prepro, tmp_path, accum_steps=3)
    state, weights = trainer.state, trainer.model.trainable_variables
    assert trainer.flush() == (0.0,) * 8 and trainer.drop_partial() == 0  # nothing pending
    before, rng = values(weights), values(state.rng_states)
    for batch in batches[:2]:
        stats, updated = trainer.train_batch(*batch)
        state.batch_in_epoch.assign_add(1)  # as train.py's loop does
        assert not updated and stats.tokens > 0 and trainer.step == 0
    assert any((a != b).any() for a, b in zip(values(state.rng_states), rng))  # masks drawn
    assert trainer.drop_partial() == 2
    assert int(state.batch_in_epoch) == 0
    for got, want in zip(values(state.rng_states), rng):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(values(weights), before):
        np.testing.assert_array_equal(got, want)
    trainer.train_batch(*batches[0])
    update = trainer.flush()  # one batch of three: applied at the epoch's end
    assert trainer.step == 1 and update.grad_norm > 0 and update.skipped == 0.0
    assert any((a != b).any() for a, b in zip(values(weights), before))
    for batch in batches[1:4]:
        _, updated = trainer.train_batch(*batch)
    assert updated and trainer.step == 2  # the third batch of a full sum updates


def test_state_saves_and_restores_the_runs_counters(demo_prepro, tmp_path):
    """RunState: what a stop would lose, before and after a save; a save into best/ and
    logdir; a new Trainer restoring it gets the weights, the step and every counter."""
    trainer, batches = trainer_for(demo_prepro, tmp_path)
    state = trainer.state
    assert state.unsaved() == "nothing is lost (no step was trained yet)"
    trainer.train_batch(*batches[0])
    assert state.unsaved() == "the 1 step trained so far is lost (no checkpoint yet)"
    state.epoch.assign(2)
    state.batch_in_epoch.assign(5)
    state.best_bleu.assign(12.5)
    state.bad_epochs.assign(1)
    state.skipped_steps.assign(3)
    state.eval_seconds.assign(4.25)
    path = state.save(best=True)
    assert path == f"{trainer.hp.logdir}/ckpt-1" == state.last_saved == state.latest_checkpoint
    assert tf.train.latest_checkpoint(state.best.directory).endswith("best/ckpt-1")
    assert state.unsaved() == f"nothing trained is lost: checkpoint {path} (step 1) is intact"
    weights = values(trainer.model.weights)
    for batch in batches[1:3]:
        trainer.train_batch(*batch)
    assert state.unsaved() == (
        f"the 2 steps since checkpoint {path} (step 1) are lost (a rerun resumes from it)"
    )
    resumed, _ = trainer_for(demo_prepro, tmp_path)
    assert resumed.state.restore(path)
    assert resumed.state.position == (1, 2, 5) and resumed.step == 1
    got = resumed.state
    assert (float(got.best_bleu), int(got.bad_epochs), int(got.skipped_steps)) == (12.5, 1, 3)
    assert float(got.eval_seconds) == 4.25 and float(got.seconds) > 0
    for w, want in zip(values(resumed.model.weights), weights):
        np.testing.assert_array_equal(w, want)  # the dropout random state too


def test_one_process_workers_agree_with_themselves(demo_prepro, tmp_path):
    trainer, _ = trainer_for(demo_prepro, tmp_path)
    workers = trainer.workers
    assert not workers.multi_worker and workers.chief
    assert workers.agree(True) and not workers.agree(False)
    assert workers.chief_value(3.5) == 3.5


def test_the_step_traces_the_kernels_its_trainer_resolved(demo_prepro, tmp_path):
    """The train step uses the C++ LayerNorm (forward and gradient) where the library
    builds; an XLA step never does (XLA has no kernel for a custom op); a benchmark's
    Kernels without native_ln gives Keras' LayerNorm; and a plain tf.function that calls
    the model in training (outside any function the trainer built) gets TensorFlow's ops."""
    native_ln = {"NativeLayerNorm", "NativeLayerNormGrad"}
    trainer, batches = trainer_for(demo_prepro, tmp_path / "plain", norm="pre")
    assert (step_ops(trainer, batches[0]) >= native_ln) == (native.ops() is not None)
    xla, batches = trainer_for(demo_prepro, tmp_path / "xla", norm="pre", jit_compile=True)
    assert xla.kernels.train_lib is None and not step_ops(xla, batches[0]) & native_ln
    hp, tok = trainer.hp, trainer.tok
    off = fast_ops.Kernels.resolve(["native_ln"])
    keras_ln = Trainer(hp, tok, tf.distribute.get_strategy(), "float32", off)
    assert not step_ops(keras_ln, batches[0]) & native_ln
    src, dec_in, _ = batches[0]
    plain = tf.function(lambda s, d: trainer.model.forward(s, d, training=True))
    graph = plain.get_concrete_function(tf.constant(src), tf.constant(dec_in)).graph
    assert not {op.type for op in graph.get_operations()} & native_ln


def test_dev_decodes_a_float32_copy_of_a_mixed_precision_model(demo_prepro, tmp_path):
    """Under mixed precision the dev evaluation decodes a float32 copy of the model (what
    eval.py decodes), the model's weights copied in at each translation: the moving
    average's inside scored_weights, a restored checkpoint's, a later step's."""
    trainer, _ = trainer_for(demo_prepro, tmp_path, precision="mixed_bfloat16", ema_decay=0.5)
    model, tok, hp = trainer.model, trainer.tok, trainer.hp
    dev = Dev(hp, tok)
    translator = dev.translator(model, tok, hp)
    assert model.compute_dtype == "bfloat16" and translator.source is model
    assert translator.model is not model and translator.model.compute_dtype == "float32"
    trainer.ema.shadows[0].assign(trainer.ema.shadows[0] + 1.0)  # the average moves apart
    for later in range(2):
        with trainer.scored_weights():
            hyps = translator.translate(dev.src)
            scored = values(model.weights)
        for copy, value in zip(values(translator.model.weights), scored, strict=True):
            np.testing.assert_array_equal(copy, value)
        keras.mixed_precision.set_global_policy("float32")
        float32 = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        for weight, value in zip(float32.weights, scored, strict=True):
            weight.assign(value)
        assert Translator(float32, tok, translator.hp).translate(dev.src) == hyps
        for weight in model.trainable_variables:  # a later step's weights
            weight.assign(weight * 0.5)
    copies = zip(values(translator.model.weights), values(model.weights))
    assert not all(np.array_equal(copy, value) for copy, value in copies)  # until the next
    keras.mixed_precision.set_global_policy("float32")  # a float32 model is decoded itself
    plain = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
    assert dev.translator(plain, tok, hp).model is plain


def test_every_entry_point_of_the_dev_translator_reads_the_weights_of_now(demo_prepro, tmp_path):
    """The dev Translator decodes a float32 copy under mixed precision: scoring and
    aligning after the model's weights changed (a later step) read the new weights, as a
    float32 model given them does, not the ones its last translation copied in."""
    trainer, _ = trainer_for(demo_prepro, tmp_path, precision="mixed_bfloat16")
    model, tok, hp = trainer.model, trainer.tok, trainer.hp
    dev = Dev(hp, tok)
    translator = dev.translator(model, tok, hp)
    src, tgt = tok.encode_src(dev.src[:6]), tok.encode_tgt(dev.ref[:6])
    translator.translate(dev.src[:6])  # the copy now holds the weights of then
    for weight in model.trainable_variables:  # a later step's weights
        weight.assign(weight * 0.5 + 0.01)
    keras.mixed_precision.set_global_policy("float32")
    float32 = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    for weight, value in zip(float32.weights, values(model.weights), strict=True):
        weight.assign(value)
    fresh = Translator(float32, tok, translator.hp)
    for got, want in zip(translator.score_ids(src, tgt), fresh.score_ids(src, tgt), strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(translator.align_ids(src, tgt), fresh.align_ids(src, tgt), strict=True):
        np.testing.assert_array_equal(got, want)
    assert translator.translate(dev.src[:6]) == fresh.translate(dev.src[:6])
