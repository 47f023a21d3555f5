"""Every option a user can choose, end to end on a tiny model and the demo corpus: train 2
steps, save, reload, translate greedy and with beam 2 (the 2 best of each line), export a
SavedModel, load it back and translate with it (the same lines as greedy decoding).

The cases: each value of each choice of ``hparams.CHOICES``, one at a time from the base
(tests/helpers.tiny: sinusoid, post-norm, the kyubyong schedule, a joint BPE vocabulary,
float32); each ``position`` with a ``norm``, the norms in turn; each ``lr_schedule`` with
a ``corpus`` or an ``attention_layers`` value; ``jit_compile``; the document memories;
``clip_norm`` and ``accum_steps``; ``ema_decay``; each preset's model (its model settings
at the tiny size; ``iwslt2016_legacy``'s runs ``key_mask_defect``); and 2 logical devices
(MirroredStrategy) for the options that touch the train step. Exempt, and why:

- the cases that change training alone (:data:`TRAINING_ONLY`: ``lr_schedule``,
  ``attention_layers``, ``corpus``, ``precision`` (decoding runs in float32), XLA,
  clipping and accumulation, the presets whose model another case runs in full): their
  models decode and export through the code of a full case, so they train, reload and
  translate greedily, without the beam and the export; ``jit_compile`` also resumes;
- the ``demo`` preset's model is ``position xl``, a case of its own;
- on 2 logical devices, decoding and export (they run on one device), the presets,
  mixed precision (the replicas' sum is the same code in every precision) and the
  model choices whose layers have no state of their own across replicas (the position
  families, the norms, the Weighted Transformer: tests/mirrored_cases.py steps it), the
  Universal Transformer (mirrored_cases.py's universal case compares its mirrored step,
  ponder cost included, with one device's), and ``clip_norm`` with ``accum_steps``
  (mirrored_cases.py's clip and accum cases compare their weights with one device's).

An invalid combination ends in one clear line (``UserError``), never a traceback.
"""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import export
import prepro
import train
from helpers import run_json_script, tiny, translate_lines
from transformer_tf2.config import hparams
from transformer_tf2.models import checkpoints

SENTENCES = ["Die Frau liest ein Buch.", "Der Hund schläft im Garten.", ""]
STEPS = 2
BASE = tiny("/base")  # the values a case changes one at a time (folders set per case)

# cases that change training alone, whose models decode and export through the code of a
# case run in full: trained, reloaded, translated greedily. Decoding runs in float32 in
# every precision; XLA, clipping and accumulation are the train step's; the iwslt2016 and
# iwslt2016_paper presets' models are the base's, multi30k's is position=xl,norm=pre
TRAINING_ONLY = (
    "lr_schedule=",
    "attention_layers=",
    "corpus=",
    "precision=",
    "jit_compile",
    "clip_norm,accum_steps",
    "preset=iwslt2016_paper",
    "preset=multi30k",
)
# choices with cases of their own below (each position with a norm, the precisions)
CROSSED = ("position", "norm", "precision")
# training-only choices run in pairs: each lr_schedule with a corpus or attention_layers
PAIRED = ("lr_schedule", "corpus", "attention_layers")
# the sizes a preset's model is tried at: the tiny model's, not the preset's
SIZES = ("vocab_size", "min_cnt", "d_model", "d_ff", "num_blocks", "num_heads", "max_position")


def choice_cases() -> dict:
    """name -> overrides: every value of every choice, one at a time from BASE."""
    cases = {}
    for field, values in hparams.CHOICES.items():
        if field in CROSSED + PAIRED:
            continue
        for value in values:
            if value != getattr(BASE, field):
                cases[f"{field}={value}"] = {field: value}
    # the training-only choices two at a time, every value once: each schedule with a
    # corpus or a figure setting (the learning rate, the batches read and the figures
    # drawn are parts of a run that do not meet)
    values = {f: [v for v in hparams.CHOICES[f] if v != getattr(BASE, f)] for f in PAIRED}
    partners = [{f: v} for f in PAIRED[1:] for v in values[f]]
    for k in range(max(len(values[PAIRED[0]]), len(partners))):
        over = {PAIRED[0]: values[PAIRED[0]][k]} if k < len(values[PAIRED[0]]) else {}
        over.update(partners[k] if k < len(partners) else {})
        cases[",".join(f"{f}={v}" for f, v in over.items())] = over
    # each position once, the norms in turn: every value of both, half the cross product
    # (a norm moves the layers' LayerNorms, a position their attention's terms)
    norms = hparams.CHOICES["norm"]
    for i, position in enumerate(hparams.CHOICES["position"]):
        norm = norms[i % len(norms)]
        cases[f"position={position},norm={norm}"] = {"position": position, "norm": norm}
    return cases


def preset_cases() -> dict:
    """name -> overrides: each preset's model and training settings at the tiny size (the
    demo preset's model is position=xl, a case of its own)."""
    cases = {}
    for name, preset in hparams.PRESETS.items():
        if name == "demo":
            continue
        values = {
            k: v
            for k, v in preset.items()
            if k in hparams.MODEL_KEYS + ("label_smoothing", "attention_dropout", "accum_steps")
            and k not in SIZES
        }
        if "max_position" in preset:  # the legacy model's learned table is its maxlen
            values.update(max_position=preset["max_position"], maxlen1=10, maxlen2=10)
        cases[f"preset={name}"] = values
    return cases


CASES = {
    **choice_cases(),
    "model_type=universal": {"model_type": "universal", "ut_max_steps": 2},
    "precision=auto": {"precision": "auto"},
    "precision=mixed_bfloat16": {"precision": "mixed_bfloat16"},
    "precision=mixed_float16": {"precision": "mixed_float16"},  # slow on a CPU, but legal
    "jit_compile": {"jit_compile": True},
    "memory_sentences": {"memory_sentences": 2, "position": "xl"},
    "target_memory_sentences": {
        "memory_sentences": 2,
        "target_memory_sentences": 2,
        "position": "t5",
    },
    "memory_sentences,position=sinusoid": {"memory_sentences": 2},
    "clip_norm,accum_steps": {"clip_norm": 0.5, "accum_steps": 2},
    # decoded from its default model: the EMA weights, or the best checkpoint's own
    "ema_decay": {"ema_decay": 0.9},
    **preset_cases(),
}
# cases that also resume: a third step from the second's checkpoint
RESUMED = ("jit_compile",)
# invalid combinations: case -> the one line they end in
INVALID = {
    "memory_sentences,position=sinusoid": "memory_sentences=2 places the earlier sentences at "
    "negative relative positions; position=sinusoid is absolute: pick one of shaw, t5, xl, "
    "alibi, alibi_dir, rotary",
}


@pytest.fixture(scope="module")
def corpora(demo_prepro, tmp_path_factory):
    """Preprocessed folders the cases share: the demo (BPE), and the same corpus with a
    word vocabulary, as plain parallel text and in the IWSLT 2016 layout, built once
    per worker on first use. Returns a function: overrides -> (data_dir, prepro_dir)."""
    root = tmp_path_factory.mktemp("corpora")
    built = {}

    def get(over):
        key = over.get("corpus", "demo"), over.get("vocab_type", "bpe"), over.get("maxlen1", 0)
        if key == ("demo", "bpe", 0):
            return demo_prepro.data_dir, demo_prepro.prepro_dir
        if key not in built:
            built[key] = build_corpus(demo_prepro, root / "-".join(map(str, key)), over)
        return built[key]

    return get


def build_corpus(demo, folder, over):
    """Preprocess the demo's sentences with ``over``'s corpus, vocabulary and lengths."""
    data = folder / "data"
    corpus = over.get("corpus", "demo")
    if corpus == "iwslt2016":  # the demo corpus is written in the IWSLT layout
        shutil.copytree(demo.data_dir, data)
        os.remove(data / "demo.json")
    elif corpus == "parallel":  # one sentence per line, at the paths the corpus reads
        data.mkdir(parents=True)
        plain = prepro.corpus_files(tiny(str(folder), corpus="parallel", data_dir=str(data)))
        for split, paths in prepro.corpus_files(demo).items():
            reader = prepro.read_iwslt_train if split == "train" else prepro.read_iwslt_xml
            for path, out in zip(paths, plain[split]):
                lines = reader(path)[0]
                with open(out, "w", encoding="utf-8") as f:
                    f.write("\n".join(lines) + "\n")
    else:
        data = demo.data_dir
    keys = ("corpus", "vocab_type", "maxlen1", "maxlen2")
    hp = tiny(str(folder), data_dir=str(data), **{k: v for k, v in over.items() if k in keys})
    prepro.preprocess(hp)
    return hp.data_dir, hp.prepro_dir


def settings(name, tmp_path, corpora, **more) -> hparams.Hparams:
    over = {**CASES[name], **more}
    data_dir, prepro_dir = corpora(over)
    return tiny(
        str(tmp_path),
        data_dir=data_dir,
        prepro_dir=prepro_dir,
        max_steps=STEPS,
        num_epochs=1,
        dev_bleu_sents=4,
        **over,
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_option_trains_saves_reloads_translates_and_exports(name, tmp_path, corpora, capsys):
    if name in INVALID:  # refused where the settings are read (hparams.apply)
        with pytest.raises(hparams.UserError) as e:
            settings(name, tmp_path, corpora)
        assert str(e.value) == INVALID[name]
        return
    hp = settings(name, tmp_path, corpora)
    summary = train.train(hp)
    assert summary["step"] == STEPS and np.isfinite(summary["train_loss"])
    assert os.path.exists(summary["checkpoint"] + ".index")
    if name in RESUMED:
        capsys.readouterr()
        resumed = train.train(dataclasses.replace(hp, max_steps=STEPS + 1))
        assert f"resumed from {summary['checkpoint']} at step {STEPS}," in capsys.readouterr().out
        assert resumed["step"] == STEPS + 1 and os.path.exists(resumed["checkpoint"] + ".index")
    greedy = translate_with(hp.logdir, {})
    if name.startswith(TRAINING_ONLY) or name == "preset=iwslt2016":
        return
    best = translate_with(hp.logdir, {"beam_size": 2}, n_best=2)
    check_n_best(best, 2)
    alone = greedy  # serving_default translates each sentence alone
    if hp.memory_sentences:  # translate.py translates the lines as one document
        alone = [translate_with(hp.logdir, {}, lines=[s])[0] for s in SENTENCES]
    check_export(hp, tmp_path / "exported", alone, greedy)


def translate_with(logdir: str, overrides: dict, n_best: int = 1, lines=SENTENCES) -> list[str]:
    """translate.py's output lines for ``lines`` from the reloaded run."""
    hp, tok, model, _ = checkpoints.load_run(logdir, overrides, who="translate")
    out = translate_lines(model, tok, hp, lines, n_best=n_best)
    assert len(out) == len(lines) * n_best  # an empty line too
    if not lines[-1]:
        assert out[-1] == ("" if n_best == 1 else f"{n_best}\t\t")
    return out


def check_n_best(lines: list[str], n: int) -> None:
    """``rank<TAB>score<TAB>translation`` lines: n per sentence, ranked, best first."""
    for k in range(len(SENTENCES) - 1):  # the last (empty) line gives empty lines
        group = [line.split("\t") for line in lines[k * n : (k + 1) * n]]
        assert [int(g[0]) for g in group] == list(range(1, n + 1))
        scores = [float(g[1]) for g in group]
        assert all(np.isfinite(scores)) and scores == sorted(scores, reverse=True)


def check_export(hp, folder, alone: list[str], document: list[str]) -> None:
    """The SavedModel, loaded back, translates each sentence as translate.py does (and,
    for a model with document context, the lines as one document as translate.py does)."""
    pytest.importorskip("tensorflow_text")
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    export.export(hp.logdir, str(folder), {})
    loaded = tf.saved_model.load(str(folder))
    out = loaded.signatures["serving_default"](sentences=tf.constant(SENTENCES))
    assert [s.decode("utf-8") for s in out["translations"].numpy()] == alone
    if hp.memory_sentences:
        doc = loaded.signatures["translate_document"](sentences=tf.constant(SENTENCES[:2]))
        assert [s.decode("utf-8") for s in doc["translations"].numpy()] == document[:2]


# the options that touch the train step, on 2 logical devices (MirroredStrategy)
# (clip_norm with accum_steps on 2 replicas: tests/mirrored_cases.py's clip and accum cases,
# which also compare the weights with one device's)
REPLICA_CASES = ("jit_compile", "memory_sentences")
REPLICAS = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import train
from transformer_tf2.utils import devices
from transformer_tf2.config import hparams
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
setup = devices.setup_devices
def two_devices(hp, who="train"):
    return strategy, setup(hp, who)[1]
train.devices.setup_devices = two_devices
out = {}
for name, values in json.loads(sys.argv[1]).items():
    hp = hparams.apply(hparams.Hparams(), values)
    summary = train.train(hp)
    out[name] = [summary["step"], summary["train_loss"]]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_options_train_on_two_logical_devices(tmp_path, corpora):
    """The options that touch the train step train 2 steps on 2 replicas, save, and the
    run reloads and translates on one device."""
    runs = {}
    for name in REPLICA_CASES:
        hp = settings(name, tmp_path / name.replace(",", "_").replace("=", "-"), corpora)
        runs[name] = dataclasses.asdict(hp)
    out = run_json_script(REPLICAS, json.dumps(runs))
    for name, values in runs.items():
        step, loss = out[name]
        assert step == STEPS and np.isfinite(loss), name
        translate_with(values["logdir"], {})
