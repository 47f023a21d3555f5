"""Train the Transformer: Adam + the Noam schedule + label smoothing (paper section 5).

    python train.py                          # the demo preset
    python train.py --preset multi30k --max_minutes 30
    tensorboard --logdir log/

Checkpoints (tf.train.CheckpointManager) go to ``logdir``; a run resumes automatically from
the latest one with the same step, optimizer state, lr schedule and data position. After
each epoch the dev set is scored (loss, greedy BLEU), its translations are written to
``evaldir``, and the best checkpoint by dev BLEU is kept in ``logdir/best``.
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hparams as H
from hparams import UserError

LOG_EVERY = 50  # steps between TensorBoard scalar summaries


def setup_devices(hp: H.Hparams):
    """Enable GPU memory growth, pick the precision and the distribution strategy.

    precision='auto' is mixed_float16 on a GPU of compute capability >= 7.0, else float32.
    Several local GPUs give a MirroredStrategy; TF_CONFIG gives MultiWorkerMirroredStrategy.
    Returns (strategy, precision).
    """
    import keras
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialized
            pass
    precision, why = hp.precision, "set by --precision"
    if precision == "auto":
        caps = [tf.config.experimental.get_device_details(g).get("compute_capability", (0, 0))
                for g in gpus]
        precision = "mixed_float16" if caps and min(caps) >= (7, 0) else "float32"
        why = (f"auto: GPU compute capability {min(caps)[0]}.{min(caps)[1]}" if caps
               else "auto: no GPU")
    keras.mixed_precision.set_global_policy(precision)
    if os.environ.get("TF_CONFIG"):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif len(gpus) > 1:
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    kind = ("MultiWorkerMirroredStrategy"
            if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            else type(strategy).__name__)
    seen = [f"{d.name} ({d.device_type})" for d in tf.config.list_physical_devices()]
    try:
        used = list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy
        used = [gpus[0].name if gpus else "the CPU"]
    print(f"train: TensorFlow sees {', '.join(seen)}; training on {', '.join(used)}; "
          f"GPU memory growth {'on' if gpus else 'n/a'}; precision {precision} ({why}); "
          f"{kind} with {strategy.num_replicas_in_sync} replica(s)",
          file=sys.stderr)
    return strategy, precision


def is_chief(strategy) -> bool:
    """True unless this is a non-chief worker of a multi-worker cluster (TF_CONFIG)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def check_logdir(hp: H.Hparams) -> None:
    """A logdir holding a run with another model shape, another batch plan or another
    vocabulary cannot be resumed."""
    import data_load
    path = os.path.join(hp.logdir, "hparams.json")
    if os.path.exists(path):
        H.check_same(H.load(path), hp, H.MODEL_KEYS + H.RESUME_KEYS,
                     f"the checkpoint in {hp.logdir}",
                     "pass a new --logdir, or the same settings to resume it")
    data_load.check_vocab_fingerprint(hp)


class Trainer:
    """Model, optimizer, checkpoints and the compiled train step of one run."""

    def __init__(self, hp: H.Hparams, tok, strategy, precision: str):
        import keras
        import tensorflow as tf
        import model as MD
        import modules as M
        self.hp, self.tok, self.strategy = hp, tok, strategy
        self.loss_scaling = precision == "mixed_float16"
        with strategy.scope():
            self.model = MD.Transformer.from_hparams(hp, tok.src_vocab_size,
                                                     tok.tgt_vocab_size)
            self.schedule = M.TransformerSchedule(hp.lr_schedule, hp.d_model,
                                                  hp.warmup_steps, hp.lr)
            opt = M.FusedAdam(self.schedule, beta_1=hp.adam_beta1,
                              beta_2=hp.adam_beta2, epsilon=hp.adam_epsilon)
            if self.loss_scaling:
                opt = keras.optimizers.LossScaleOptimizer(opt)
            self.optimizer = opt
            # Weighted Transformer: kappa and alpha have their own Adam and Noam schedule
            # with a short warmup (Ahmed et al. 2017, sec. 4: 400 steps)
            self.branch_ids = {id(v) for v in self.model.branch_variables}
            self.main_variables = [v for v in self.model.trainable_variables
                                   if id(v) not in self.branch_ids]
            self.branch_optimizer = None
            if self.branch_ids:
                self.branch_schedule = M.TransformerSchedule(
                    hp.lr_schedule, hp.d_model, hp.branch_warmup_steps, hp.lr)
                self.branch_optimizer = M.FusedAdam(
                    self.branch_schedule, beta_1=hp.adam_beta1, beta_2=hp.adam_beta2,
                    epsilon=hp.adam_epsilon)
                self.branch_optimizer.build(self.model.branch_variables)
            self.optimizer.build(self.main_variables)
        # host-side counters, outside the strategy scope: every worker keeps the same ones
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.batch_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False,
                                          name="batch_in_epoch")
        self.best_bleu = tf.Variable(-1.0, dtype=tf.float32, trainable=False)
        self.bad_epochs = tf.Variable(0, dtype=tf.int64, trainable=False)
        extra = {"branch_optimizer": self.branch_optimizer} if self.branch_optimizer else {}
        self.ckpt = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                                        epoch=self.epoch, batch_in_epoch=self.batch_in_epoch,
                                        best_bleu=self.best_bleu, bad_epochs=self.bad_epochs,
                                        **extra)
        # Multi-worker: every worker takes part in a save (the variables may need a
        # collective read), but only the chief writes into logdir; the others write to a
        # private temporary folder that is deleted right after (see save()).
        self.chief = is_chief(strategy)
        self.last_saved = None  # the chief's path of this run's newest checkpoint
        target = hp.logdir if self.chief else os.path.join(
            hp.logdir, f".worker-{strategy.cluster_resolver.task_id}-tmp")
        self.manager = tf.train.CheckpointManager(self.ckpt, target, hp.keep_ckpts)
        self.best = tf.train.CheckpointManager(self.ckpt, os.path.join(target, "best"), 1)
        spec = tf.TensorSpec([None, None], tf.int32)
        self.replicas = strategy.num_replicas_in_sync
        # one trace for every batch shape (several replicas get per-replica values instead)
        self._step = tf.function(self._distributed_step, input_signature=[spec] * 3) \
            if self.replicas == 1 else tf.function(self._distributed_step,
                                                   reduce_retracing=True)
        # gradient accumulation (single replica): accum_steps batches make one update;
        # updates happen only on batch boundaries so checkpoints never hold a partial sum
        self.pending = 0
        if hp.accum_steps > 1:
            if strategy.num_replicas_in_sync > 1:
                raise UserError("accum_steps > 1 works on one device only for now; "
                                "raise tokens_per_batch instead")
            self.accum = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False)
                          for v in self.model.trainable_variables]
            self.accum_tokens = tf.Variable(0.0, trainable=False)
            self._accumulate_fn = tf.function(self._accumulate, input_signature=[spec] * 3,
                                              jit_compile=hp.jit_compile)
            self._apply_fn = tf.function(self._apply_accumulated)
        self._compiled = tf.function(self._replica_step, jit_compile=True) \
            if hp.jit_compile else self._replica_step

    @property
    def step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    def save(self, best: bool = False) -> str:
        """Checkpoint at the current step (into logdir/best too when ``best``); returns the
        chief's path. Non-chief workers save to their temporary folder and delete it."""
        import shutil
        path = self.manager.save(checkpoint_number=self.step)
        if best:
            self.best.save(checkpoint_number=self.step)
        if not self.chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
            path = os.path.join(self.hp.logdir, os.path.basename(path))
        self.last_saved = path
        return path

    @property
    def latest_checkpoint(self):
        """The newest checkpoint in logdir (the chief's, for every worker)."""
        import tensorflow as tf
        return tf.train.latest_checkpoint(self.hp.logdir)

    def restore(self) -> bool:
        path = self.latest_checkpoint
        if not path:
            return False
        import tensorflow as tf
        try:
            self.ckpt.restore(path).assert_existing_objects_matched()
        except (ValueError, AssertionError, IndexError, tf.errors.OpError) as e:
            raise UserError(f"cannot restore {path} ({str(e).splitlines()[0][:160]}); the "
                            f"checkpoint is damaged or was written with another --precision: "
                            f"resume with the same settings or use a new --logdir") from None
        print(f"train: resumed from {path} at step {self.step}, epoch {int(self.epoch) + 1}, "
              f"batch {int(self.batch_in_epoch)}")
        return True

    def loss_terms(self, src, dec_in, labels, training):
        """Sum of label-smoothed losses over non-PAD targets, their count and the
        number of correct argmax predictions. Logits are only computed for non-PAD
        positions (gathered before the output projection) unless XLA needs static shapes."""
        import tensorflow as tf
        import modules as M
        memory, mask = self.model.encode(src, training=training)
        hidden = self.model.decode(dec_in, memory, mask, training=training)
        real = tf.not_equal(labels, 0)
        if self.hp.jit_compile:
            logits = self.model.logits(hidden)
            flat = tf.reshape(logits, (-1, tf.shape(logits)[-1]))
            y = tf.reshape(labels, (-1,))
            weight = tf.cast(tf.reshape(real, (-1,)), tf.float32)
        else:
            flat = self.model.logits(tf.boolean_mask(hidden, real))
            y = tf.boolean_mask(labels, real)
            weight = tf.ones_like(y, tf.float32)
        losses, nll, correct = M.cross_entropy_terms(flat, y, self.hp.label_smoothing)
        return (tf.reduce_sum(losses * weight), tf.reduce_sum(nll * weight),
                tf.reduce_sum(weight), tf.reduce_sum(correct * weight))

    def _clip_and_apply(self, grads):
        """Clip (optional) and apply gradients of the mean loss; returns the global norm.
        Under mixed_float16 the gradients arrive loss-scaled; the optimizer unscales."""
        import tensorflow as tf
        scale = tf.cast(self.optimizer.scale_loss(1.0), tf.float32) \
            if self.loss_scaling else 1.0
        # (the Keras optimizer sums gradients over replicas in apply_gradients; with
        # several replicas, norm and clipping below see this replica's share)
        norm = tf.linalg.global_norm(grads) / scale
        if self.hp.clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, self.hp.clip_norm * scale,
                                              use_norm=norm * scale)
        if self.branch_optimizer is None:
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
            return norm
        pairs = list(zip(grads, self.model.trainable_variables))
        self.optimizer.apply_gradients([(g, v) for g, v in pairs
                                        if id(v) not in self.branch_ids])
        branch_grads = [(g, v) for g, v in pairs if id(v) in self.branch_ids]
        if self.loss_scaling:
            # the LossScaleOptimizer unscales and skips the main update on overflow; the
            # kappa/alpha gradients are unscaled here and zeroed on such a step
            finite = tf.math.is_finite(norm)
            branch_grads = [(tf.where(finite, g / scale, tf.zeros_like(g)), v)
                            for g, v in branch_grads]
        self.branch_optimizer.apply_gradients(branch_grads)
        return norm

    def _replica_step(self, src, dec_in, labels):
        import tensorflow as tf
        ctx = tf.distribute.get_replica_context()
        with tf.GradientTape() as tape:
            loss_sum, nll_sum, ntok, correct = self.loss_terms(src, dec_in, labels, True)
            # normalise by the global number of target tokens, over all replicas
            global_ntok = ctx.all_reduce("sum", ntok) if ctx else ntok
            loss = loss_sum / tf.maximum(global_ntok, 1.0)
            scaled = self.optimizer.scale_loss(loss) if self.loss_scaling else loss
        grads = tape.gradient(scaled, self.model.trainable_variables)
        norm = self._clip_and_apply(grads)
        return tf.stack([loss_sum, nll_sum, ntok, correct, norm])

    def _accumulate(self, src, dec_in, labels):
        """Add this batch's gradients of the summed loss to the accumulators."""
        import tensorflow as tf
        with tf.GradientTape() as tape:
            loss_sum, nll_sum, ntok, correct = self.loss_terms(src, dec_in, labels, True)
            # divided by the token budget so that float16 gradients keep the magnitude
            # of a per-token mean (the update divides by the real token count)
            per_budget = loss_sum / float(self.hp.tokens_per_batch)
            scaled = self.optimizer.scale_loss(per_budget) if self.loss_scaling else per_budget
        grads = tape.gradient(scaled, self.model.trainable_variables)
        for acc, grad in zip(self.accum, grads):
            acc.assign_add(tf.convert_to_tensor(grad))
        self.accum_tokens.assign_add(ntok)
        return tf.stack([loss_sum, nll_sum, ntok, correct, 0.0])

    def _apply_accumulated(self):
        """One update with the accumulated gradients over all their target tokens."""
        import tensorflow as tf
        tokens = tf.maximum(self.accum_tokens, 1.0) / float(self.hp.tokens_per_batch)
        norm = self._clip_and_apply([acc / tokens for acc in self.accum])
        for acc in self.accum:
            acc.assign(tf.zeros_like(acc))
        self.accum_tokens.assign(0.0)
        return norm

    def _distributed_step(self, src, dec_in, labels):
        import tensorflow as tf
        out = self.strategy.run(self._compiled, (src, dec_in, labels))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, out, axis=None) / \
            tf.constant([1, 1, 1, 1, self.strategy.num_replicas_in_sync], tf.float32)

    def train_step(self, src, dec_in, labels):
        """One update; returns numpy [loss_sum, nll_sum, tokens, correct, grad_norm].

        With several replicas the batch's rows are dealt out among them; each replica's
        loss is divided by the global number of target tokens and the optimizer sums the
        replicas' gradients, which gives the single-device update of the whole batch.
        """
        if self.replicas > 1:
            n = self.replicas
            shards = self.strategy.experimental_distribute_values_from_function(
                lambda ctx: tuple(x[ctx.replica_id_in_sync_group::n]
                                  for x in (src, dec_in, labels)))
            return self._step(*shards).numpy()
        return self._step(src, dec_in, labels).numpy()

    def train_batch(self, src, dec_in, labels):
        """Train on one batch: an update, or with accum_steps > 1 one accumulation that
        updates every accum_steps batches. Returns (stats as train_step, updated)."""
        if self.hp.accum_steps <= 1:
            return self.train_step(src, dec_in, labels), True
        stats = self._accumulate_fn(src, dec_in, labels).numpy()
        self.pending += 1
        if self.pending < self.hp.accum_steps:
            return stats, False
        stats[4] = self.flush()
        return stats, True

    def flush(self) -> float:
        """Apply a partial accumulation (at the end of an epoch); returns the grad norm."""
        if not self.pending:
            return 0.0
        self.pending = 0
        return float(self._apply_fn())

    def dev_loss(self, corpus, batch_size: int) -> tuple[float, float]:
        """Per-token (label-smoothed loss, cross-entropy) on a dev corpus, no dropout."""
        import numpy as np
        import tensorflow as tf
        import data_load
        fn = getattr(self, "_dev_fn", None)
        if fn is None:
            spec = tf.TensorSpec([None, None], tf.int32)
            fn = self._dev_fn = tf.function(
                lambda s, d, l: tf.stack(self.loss_terms(s, d, l, False)),
                input_signature=[spec] * 3)
        order = np.argsort(corpus.src_lens, kind="stable")
        total = np.zeros(4)
        for start in range(0, len(order), batch_size):
            total += fn(*data_load.build_batch(corpus, order[start:start + batch_size])).numpy()
        return total[0] / max(total[2], 1), total[1] / max(total[2], 1)


def log_branch_weights(trainer: Trainer, step: int) -> None:
    """Weighted Transformer: kappa and alpha of every layer to TensorBoard, one scalar per
    branch (branch/<layer>/kappa_<i>) and a histogram per layer, plus their lr."""
    import tensorflow as tf
    if trainer.branch_optimizer is None:
        return
    tf.summary.scalar("train/branch_lr", float(trainer.branch_schedule(step - 1)))
    for name, value in trainer.model.branch_weights().items():
        tf.summary.histogram(f"branch/{name}", value)
        for i, x in enumerate(value):
            tf.summary.scalar(f"branch/{name}_{i}", float(x))


def write_specs(model, path: str) -> None:
    H.atomic_write(path, "\n".join(model.summary_lines()) + "\n")


def attention_images(model, tok, src_text: str, ref_text: str, scale: int = 8):
    """Last-layer attention maps for one sentence pair, teacher-forced on the reference.

    Returns {name: (num_heads, T_q * scale, T_k * scale, 1) float images in [0, 1]}.
    """
    import numpy as np
    import tensorflow as tf
    from prepro import BOS_ID, EOS_ID
    src = np.concatenate([tok.encode_src([src_text])[0], [EOS_ID]]).astype(np.int32)[None]
    tgt = np.concatenate([[BOS_ID], tok.encode_tgt([ref_text])[0]]).astype(np.int32)[None]
    memory, mask, enc_w = model.encode(tf.constant(src), return_attention=True)
    _, dec_w = model.decode(tf.constant(tgt), memory, mask, return_attention=True)
    maps = {"encoder_self": enc_w[-1], "decoder_self": dec_w[-1][0],
            "decoder_cross": dec_w[-1][1]}
    out = {}
    for name, w in maps.items():
        w = w.numpy()[0]                                     # (h, T_q, T_k)
        w = np.repeat(np.repeat(w, scale, axis=1), scale, axis=2)
        out[name] = w[..., None].astype(np.float32)
    return out


def train(hp: H.Hparams) -> dict:
    """Run (or resume) training; returns a summary dict (steps, last dev BLEU, ...)."""
    import tensorflow as tf
    import data_load
    import eval as E

    check_logdir(hp)
    tok = data_load.load_tokenizer(hp)
    strategy, precision = setup_devices(hp)
    import keras
    keras.utils.set_random_seed(hp.seed)
    # tokens_per_batch is per replica: a global batch holds replicas x that budget and
    # its rows are dealt out to the replicas
    data = data_load.TrainData(hp, replicas=strategy.num_replicas_in_sync)
    dev = data_load.load_corpus(hp, "dev")
    dev_src, dev_ref = data_load.read_raw(hp, "dev")
    n_dev = len(dev_src) if hp.dev_bleu_sents <= 0 else min(hp.dev_bleu_sents, len(dev_src))

    trainer = Trainer(hp, tok, strategy, precision)
    model = trainer.model
    trainer.restore()
    os.makedirs(hp.logdir, exist_ok=True)
    if trainer.chief:  # in a multi-worker run only the chief writes into logdir
        H.save(hp, os.path.join(hp.logdir, "hparams.json"))
        data_load.write_vocab_fingerprint(hp)
        write_specs(model, os.path.join(hp.logdir, "specs"))
        writer = tf.summary.create_file_writer(os.path.join(hp.logdir, "train"))
    else:
        writer = tf.summary.create_noop_writer()
    print(f"train: {model.count_params():,} parameters; {len(data.keep):,} training pairs; "
          f"logdir {hp.logdir}")
    decoder = E.Translator(model, tok, hp)

    try:
        return _train_loop(hp, tok, trainer, data, dev, dev_src[:n_dev], dev_ref[:n_dev],
                           writer, decoder)
    except KeyboardInterrupt:  # keep what was trained since the last checkpoint
        if trainer.pending == 0:
            path = trainer.save()
            print(f"train: interrupted; saved {path}", file=sys.stderr)
        raise


def _train_loop(hp, tok, trainer, data, dev, dev_src, dev_ref, writer, decoder) -> dict:
    """The epochs of :func:`train`, from the restored position to the end."""
    import numpy as np
    import tensorflow as tf
    from tqdm import tqdm
    import data_load
    t_start, stop_reason, history = time.time(), None, []
    first_loss = last_loss = float("nan")  # running loss at this run's first and last log
    saved_step = trainer.step if trainer.latest_checkpoint else -1
    if int(trainer.epoch) >= hp.num_epochs:
        print(f"train: {hp.logdir} has already finished {hp.num_epochs} epochs; raise "
              f"--num_epochs to train on")
    while int(trainer.epoch) < hp.num_epochs and stop_reason is None:
        epoch = int(trainer.epoch)
        skip = int(trainer.batch_in_epoch)
        plan = data.batches(epoch)
        if epoch == 0 and skip == 0:
            pad_s, pad_t = data_load.padding_fraction(plan, data.corpus, hp.pad_multiple)
            print(f"train: {len(plan):,} batches per epoch; padding {pad_s:.1%} of source "
                  f"and {pad_t:.1%} of target positions")
        bar = tqdm(data.dataset(epoch, skip, plan), total=len(plan), initial=skip,
                   desc=f"epoch {epoch + 1}/{hp.num_epochs}", unit="batch", dynamic_ncols=True)
        window = np.zeros(5)
        t_window = time.time()
        for src, dec_in, labels in bar:
            stats, updated = trainer.train_batch(src, dec_in, labels)
            window += stats
            trainer.batch_in_epoch.assign_add(1)
            if not updated:
                continue
            step = trainer.step
            if step % 10 == 0 or step == 1:
                elapsed = max(time.time() - t_window, 1e-9)
                lr = float(trainer.schedule(step - 1))
                last_loss = window[0] / max(window[2], 1)
                first_loss = first_loss if first_loss == first_loss else last_loss
                bar.set_postfix(loss=f"{last_loss:.3f}", lr=f"{lr:.2e}",
                                tok_s=f"{window[2] / elapsed:,.0f}")
                if step % LOG_EVERY == 0 or step == 1:
                    with writer.as_default(step=step):
                        tf.summary.scalar("train/loss", window[0] / max(window[2], 1))
                        tf.summary.scalar("train/nll", window[1] / max(window[2], 1))
                        tf.summary.scalar("train/accuracy", window[3] / max(window[2], 1))
                        tf.summary.scalar("train/grad_norm", stats[4])
                        tf.summary.scalar("train/lr", lr)
                        tf.summary.scalar("train/tokens_per_sec", window[2] / elapsed)
                        log_branch_weights(trainer, step)
                    window[:] = 0
                    t_window = time.time()
            if hp.ckpt_every_steps and step % hp.ckpt_every_steps == 0:
                trainer.save()
                saved_step = step
            if hp.max_steps and step >= hp.max_steps:
                stop_reason = f"max_steps={hp.max_steps} reached"
            elif hp.max_minutes and time.time() - t_start >= 60 * hp.max_minutes:
                stop_reason = f"max_minutes={hp.max_minutes:g} reached"
            if stop_reason:
                break
        bar.close()
        if stop_reason:
            break
        trainer.flush()  # the epoch's last, partial accumulation
        trainer.epoch.assign_add(1)
        trainer.batch_in_epoch.assign(0)
        result = end_of_epoch(trainer, hp, tok, decoder, dev, dev_src, dev_ref, writer)
        saved_step = trainer.step
        history.append(result)
        if hp.early_stopping and int(trainer.bad_epochs) >= hp.early_stopping:
            stop_reason = f"no better dev BLEU for {hp.early_stopping} epochs"
        elif hp.max_steps and trainer.step >= hp.max_steps:
            stop_reason = f"max_steps={hp.max_steps} reached"
    if saved_step != trainer.step:
        trainer.save()
    # the path this run saved (a non-chief worker may look before the chief's
    # `checkpoint` file names it), else the one it resumed from
    path = trainer.last_saved or trainer.latest_checkpoint
    writer.flush()
    print(f"train: {stop_reason or 'done'}; step {trainer.step}; checkpoint {path}")
    return {"step": trainer.step, "epoch": int(trainer.epoch), "history": history,
            "checkpoint": path, "stop_reason": stop_reason, "train_loss": last_loss,
            "first_loss": first_loss}


def end_of_epoch(trainer: Trainer, hp, tok, decoder, dev, dev_src, dev_ref, writer) -> dict:
    """Dev loss, dev BLEU, translations to evaldir, summaries, best checkpoint."""
    import tensorflow as tf
    import eval as E
    epoch, step = int(trainer.epoch), trainer.step
    dev_loss, dev_nll = trainer.dev_loss(dev, max(1, hp.tokens_per_batch // 64))
    hyps = decoder.translate(dev_src)
    scores = E.scores(hyps, dev_ref)
    bleu = scores["sacrebleu"]
    if trainer.chief:
        name = f"E{epoch:02d}L{dev_loss:.2f}"
        H.atomic_write(os.path.join(hp.evaldir, name),
                       "\n".join(hyps) + f"\nBLEU = {bleu:.2f}\n")
    with writer.as_default(step=step):
        tf.summary.scalar("dev/loss", dev_loss)
        tf.summary.scalar("dev/nll", dev_nll)
        tf.summary.scalar("dev/bleu", bleu)
        tf.summary.scalar("dev/chrf", scores["chrf"])
        rows = [f"| {s} | {r} | {h} |" for s, r, h in zip(dev_src[:5], dev_ref[:5], hyps[:5])]
        tf.summary.text("dev/translations", "\n".join(
            ["| source | reference | translation |", "|---|---|---|"] + rows))
        if dev_src:
            for key, image in attention_images(trainer.model, tok, dev_src[0],
                                               dev_ref[0]).items():
                tf.summary.image(f"attention/{key}", image, max_outputs=image.shape[0])
    writer.flush()
    improved = bleu > float(trainer.best_bleu)
    if improved:
        trainer.best_bleu.assign(bleu)
        trainer.bad_epochs.assign(0)
    else:
        trainer.bad_epochs.assign_add(1)
    # the counters are updated first, so that a resumed run knows the true best so far
    path = trainer.save(best=improved)
    print(f"epoch {epoch}: dev loss {dev_loss:.3f}, dev BLEU {bleu:.2f}"
          f"{' (best)' if improved else ''}; e.g. {dev_src[0]!r} -> {hyps[0]!r}; {path}")
    return {"epoch": epoch, "step": step, "dev_loss": dev_loss, "dev_bleu": bleu}


def main() -> None:
    hp, _ = H.parse_args()
    train(hp)


if __name__ == "__main__":
    H.run_main(main)
