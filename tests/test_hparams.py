"""Tests for hparams: presets, command-line parsing, validation, JSON round trip, run_main."""

import dataclasses
import json
import sys

import pytest

import average_checkpoints
from transformer_tf2.config import checks, cli, hparams


# ------------------------------------------------------------------------------ presets
def test_all_presets_exist_and_validate():
    assert set(hparams.PRESETS) == {
        "demo",
        "multi30k",
        "iwslt2016",
        "iwslt2016_paper",
        "iwslt2016_legacy",
    }
    for name in hparams.PRESETS:
        hp = hparams.preset(name)
        assert isinstance(hp, hparams.Hparams)
        assert hp.d_model % hp.num_heads == 0
        for key, allowed in hparams.CHOICES.items():
            assert getattr(hp, key) in allowed, (name, key)
        # every preset key is a real field
        assert set(hparams.PRESETS[name]) <= set(hparams.FIELDS), name


def test_the_demo_preset_is_the_dataclass_defaults():
    """python train.py with no --preset runs the defaults of hparams.py as they stand:
    the demo preset adds nothing to them (an edit of hparams.py takes effect)."""
    hp = hparams.preset("demo")
    assert hparams.PRESETS["demo"] == {} and hp == hparams.Hparams()
    assert (hp.corpus, hp.vocab_type, hp.vocab_size) == ("demo", "bpe", 1000)
    assert (hp.d_model, hp.d_ff, hp.num_blocks, hp.num_heads) == (128, 512, 2, 4)
    assert hp.position == "xl" and hp.norm == "post" and hp.share_embeddings is True
    assert hp.lr_schedule == "wsd" and hp.lr == 0.003 and hp.cooldown == 0.2
    assert hp.warmup_steps == 200 and hp.num_epochs == 4 and hp.average == 3
    assert hp.embedding_dropout < 0 and hparams.dropout(hp, "residual") == 0.0
    assert hp.precision == "auto" and hp.eval_share == 0.1


def test_multi30k_preset():
    hp = hparams.preset("multi30k")
    assert hp.corpus == "parallel"
    assert hp.data_dir == "data/multi30k" and hp.prepro_dir == "prepro/multi30k"
    assert hp.logdir == "log/multi30k" and hparams.eval_folder(hp) == "log/multi30k/eval"
    assert hp.vocab_type == "bpe" and hp.vocab_size == 8000
    assert (hp.d_model, hp.d_ff, hp.num_blocks, hp.num_heads) == (256, 1024, 3, 8)
    assert hp.dropout_rate == 0.1 and hp.num_epochs == 30 and hp.dev_bleu_sents == 500
    assert (hp.lr_schedule, hp.lr, hp.warmup_steps, hp.tokens_per_batch) == (
        "wsd",
        0.003,
        400,
        2048,
    )
    assert (hp.position, hp.norm) == ("xl", "pre")  # chosen on dev (bench/search.py)
    assert hp.average == 3 and hp.eval_share == 0.1  # (docs/training.md)
    # the longer decay with stronger label smoothing, chosen on dev (docs/tuning.md, stage 8)
    assert (hp.cooldown, hp.label_smoothing) == (0.4, 0.2)
    # dropout on the attention weights, chosen on dev (docs/tuning.md, stage 9)
    assert hp.attention_dropout == 0.2 and hparams.preset("demo").attention_dropout == 0.0
    # beam search's alpha, chosen on dev (docs/tuning.md, stage 6); the paper's 0.6 elsewhere
    assert hp.length_penalty == 1.0 and hparams.preset("demo").length_penalty == 0.6


def test_presets_state_only_what_differs_from_the_defaults():
    """No preset restates a default (the shared IWSLT 2016 base included), and the IWSLT
    presets share that base: the paper's model and positions."""
    default = hparams.Hparams()
    for name, values in hparams.PRESETS.items():
        same = [k for k, v in values.items() if getattr(default, k) == v]
        assert not same, (name, same)
    for name in ("iwslt2016", "iwslt2016_paper", "iwslt2016_legacy"):
        hp = hparams.preset(name)
        assert (hp.corpus, hp.d_model, hp.d_ff, hp.num_blocks, hp.num_heads) == (
            "iwslt2016",
            512,
            2048,
            6,
            8,
        )
        assert hp.position == ("learned" if name.endswith("legacy") else "sinusoid")
        assert (hp.prepro_dir, hp.logdir, hparams.eval_folder(hp)) == (
            f"prepro/{name}",
            f"log/{name}",
            f"log/{name}/eval",
        )


def test_presets_apply_their_values():
    for name, values in hparams.PRESETS.items():
        hp = hparams.preset(name)
        for key, value in values.items():
            assert getattr(hp, key) == value, (name, key)
        untouched = set(hparams.FIELDS) - set(values) - {"share_embeddings"}
        for key in untouched:
            assert getattr(hp, key) == getattr(hparams.Hparams(), key), (name, key)


def test_iwslt2016_preset():
    """The 2019 Kyubyong hparams.py values (Kyubyong/transformer, January 2019): vocab_size
    32000, batch_size 128, lr 0.0003, warmup_steps 4000, num_epochs 20, d_model 512,
    d_ff 2048, num_blocks 6, num_heads 8, maxlen1/2 100, dropout_rate 0.3, smoothing
    0.1; its train uses tf.train.AdamOptimizer(lr): beta2 0.999, epsilon 1e-8."""
    hp = hparams.preset("iwslt2016")
    assert hp.corpus == "iwslt2016" and hp.data_dir == "data/iwslt2016"
    assert hp.prepro_dir == "prepro/iwslt2016" and hp.logdir == "log/iwslt2016"
    assert hp.vocab_type == "bpe" and hp.vocab_size == 32000
    assert hp.d_model == 512 and hp.d_ff == 2048
    assert hp.num_blocks == 6 and hp.num_heads == 8
    assert hp.dropout_rate == 0.3 and hp.label_smoothing == 0.1
    assert hp.lr_schedule == "kyubyong" and hp.lr == 0.0003
    assert hp.warmup_steps == 4000 and hp.num_epochs == 20
    assert hp.maxlen1 == 100 and hp.maxlen2 == 100
    assert hp.batch_size == 128 and hp.eval_batch_size == 128
    assert (hp.adam_beta1, hp.adam_beta2, hp.adam_epsilon) == (0.9, 0.999, 1e-8)
    assert (hp.iwslt_dev, hp.iwslt_test) == ("tst2013", "tst2014")
    assert hp.position == "sinusoid" and hp.share_embeddings is True
    # the paper's model, not the 2019 code's (docs/training.md: its differences and their switches)
    assert hp.output_projection and hp.tie_softmax and hp.qkv_activation == "none"


def test_iwslt2016_paper_preset():
    """The paper's base settings: Noam with 4000 warmup steps, about 25k tokens per
    update, dropout 0.1, Adam (0.9, 0.98, 1e-9), beam 4 with alpha 0.6, the last 5
    checkpoints kept for averaging."""
    hp = hparams.preset("iwslt2016_paper")
    assert (hp.d_model, hp.d_ff, hp.num_blocks, hp.num_heads) == (512, 2048, 6, 8)
    assert hp.lr_schedule == "noam" and hp.warmup_steps == 4000
    assert 24000 <= hp.tokens_per_batch * hp.accum_steps <= 26000 and hp.accum_steps > 1
    assert hp.batch_size == 0  # the token budget decides
    assert hp.dropout_rate == 0.1 and hp.label_smoothing == 0.1
    assert (hp.adam_beta1, hp.adam_beta2, hp.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert hp.beam_size == 4 and hp.length_penalty == 0.6 and hp.max_len_extra == 50
    assert hp.keep_ckpts >= average_checkpoints.DEFAULT_LAST == 5
    model_default = {k: getattr(hparams.Hparams(), k) for k in hparams.MODEL_KEYS}
    switches = set(hparams.MODEL_KEYS) - set(hparams.PRESETS["iwslt2016_paper"])
    assert {k: getattr(hp, k) for k in switches} == {k: model_default[k] for k in switches}


def test_iwslt2016_legacy_preset():
    """The tf1.2 code (hyperparams.py, train.py, modules.py of Kyubyong/transformer's
    tf1.2_legacy): every TF1 switch set the TF1 way."""
    hp = hparams.preset("iwslt2016_legacy")
    assert hp.corpus == "iwslt2016" and hp.data_dir == "data/iwslt2016"
    assert hp.prepro_dir == "prepro/iwslt2016_legacy" and hp.logdir == "log/iwslt2016_legacy"
    assert hp.vocab_type == "word" and hp.min_cnt == 20
    assert hp.maxlen1 == 10 and hp.maxlen2 == 10
    assert hp.pad_multiple == 10  # every batch padded to maxlen, as its fixed (N, 10) arrays
    assert hp.position == "learned" and hp.max_position == 10  # a table of maxlen rows
    assert hp.share_embeddings is False and hp.tie_softmax is False
    assert hp.lr_schedule == "constant" and hp.lr == 0.0001
    assert (hp.adam_beta1, hp.adam_beta2, hp.adam_epsilon) == (0.9, 0.98, 1e-8)
    assert hp.batch_size == 32
    assert (hp.d_model, hp.d_ff, hp.num_blocks, hp.num_heads) == (512, 2048, 6, 8)
    assert hp.dropout_rate == 0.1 and hp.label_smoothing == 0.1 and hp.num_epochs == 20
    assert hparams.dropout(hp, "embedding") == 0.1 and hparams.dropout(hp, "residual") == 0.0
    assert hp.attention_dropout == 0.1
    assert hp.qkv_activation == "relu" and hp.qkv_bias and not hp.output_projection
    assert hp.query_masking and hp.key_mask_defect
    assert hp.layer_norm_epsilon == 1e-8 and hp.embedding_init == "xavier"
    assert hp.legacy_protocol


def test_every_preset_keeps_the_checkpoints_that_are_averaged():
    assert average_checkpoints.DEFAULT_LAST == 5  # the paper's base model (6.1)
    for name in hparams.PRESETS:
        assert hparams.preset(name).keep_ckpts >= average_checkpoints.DEFAULT_LAST, name


def test_model_switches_are_checkpoint_keys_with_the_papers_defaults():
    switches = {
        "qkv_activation": "none",
        "qkv_bias": False,
        "output_projection": True,
        "query_masking": False,
        "key_mask_defect": False,
        "tie_softmax": True,
        "layer_norm_epsilon": 1e-6,
        "embedding_init": "normal",
    }
    assert set(switches) <= set(hparams.MODEL_KEYS)
    assert {k: getattr(hparams.Hparams(), k) for k in switches} == switches
    # the dropout rates change training only: a checkpoint does not depend on them
    assert not {"dropout_rate", "embedding_dropout", "residual_dropout"} & set(hparams.MODEL_KEYS)


def test_dropout_rate_still_sets_both_dropouts():
    """An older hparams.json or command line that knows dropout_rate alone keeps its
    meaning: it is the embedding and the residual dropout unless they are set apart."""
    hp = hparams.apply(hparams.Hparams(), {"dropout_rate": 0.3})
    assert hp.embedding_dropout < 0 and hp.residual_dropout < 0
    assert hparams.dropout(hp, "embedding") == hparams.dropout(hp, "residual") == 0.3
    hp, _ = cli.parse_args(["--dropout_rate", "0.2", "--residual_dropout", "0"])
    assert (hparams.dropout(hp, "embedding"), hparams.dropout(hp, "residual")) == (0.2, 0.0)
    hp, _ = cli.parse_args(["--preset", "iwslt2016", "--embedding_dropout", "0.05"])
    assert (hparams.dropout(hp, "embedding"), hparams.dropout(hp, "residual")) == (0.05, 0.3)


def test_presets_do_not_share_prepro_or_log_dirs():
    hps = [hparams.preset(n) for n in hparams.PRESETS]
    assert len({hp.prepro_dir for hp in hps}) == len(hps)
    assert len({hp.logdir for hp in hps}) == len(hps)


def test_unknown_preset_suggests_closest():
    with pytest.raises(hparams.UserError) as e:
        hparams.preset("multi30")
    msg = str(e.value)
    assert "unknown preset 'multi30'" in msg and "did you mean 'multi30k'" in msg
    with pytest.raises(hparams.UserError, match="did you mean 'iwslt2016"):
        cli.parse_args(["--preset", "iwslt2061"])


# ------------------------------------------------------------------------------ parse_args
def test_parse_args_preset_and_overrides():
    hp, extra = cli.parse_args(["--preset", "multi30k", "--d_model", "512", "--sinusoid", "false"])
    assert hp.d_model == 512 and isinstance(hp.d_model, int)
    assert hp.position == "learned"
    # the rest of the preset is kept
    assert hp.corpus == "parallel" and hp.vocab_size == 8000 and hp.num_heads == 8
    assert extra["_preset"] == "multi30k"
    assert extra["_set"] == {"d_model", "position"}


def test_parse_args_defaults_to_demo_and_empty_set():
    hp, extra = cli.parse_args([])
    assert hp == hparams.preset("demo") and hp.position == "xl"
    assert extra == {"_preset": "demo", "_set": set()}


def test_parse_args_equals_form_and_types():
    hp, extra = cli.parse_args(
        [
            "--preset=iwslt2016",
            "--num_epochs=3",
            "--lr=0.002",
            "--jit_compile=yes",
            "--norm=pre",
            "--dropout_rate",
            "0.25",
        ]
    )
    assert extra["_preset"] == "iwslt2016"
    assert hp.num_epochs == 3 and isinstance(hp.num_epochs, int)
    assert hp.lr == pytest.approx(0.002) and isinstance(hp.lr, float)
    assert hp.jit_compile is True and hp.norm == "pre"
    assert hp.dropout_rate == pytest.approx(0.25)
    assert extra["_set"] == {"num_epochs", "lr", "jit_compile", "norm", "dropout_rate"}


def test_parse_args_dashes_in_key_become_underscores():
    hp, _ = cli.parse_args(["--d-model", "256", "--num-heads", "8"])
    assert hp.d_model == 256 and hp.num_heads == 8


def test_parse_args_equals_form_keeps_value_verbatim():
    """BUG (hparams.py, parse_args): `arg[2:].replace("-", "_")` is applied before splitting
    on '=', so dashes inside the *value* of --key=value are turned into underscores:
    --data_dir=/tmp/my-data becomes /tmp/my_data and --lr=1e-4 is rejected as '1e_4'."""
    hp, _ = cli.parse_args(["--data_dir=/tmp/my-data", "--prepro_dir", "/tmp/pre-pro"])
    assert hp.prepro_dir == "/tmp/pre-pro"  # the space-separated form is fine
    assert hp.data_dir == "/tmp/my-data"
    hp, _ = cli.parse_args(["--lr=1e-4"])
    assert hp.lr == pytest.approx(1e-4)


def test_parse_args_extra_options():
    hp, extra = cli.parse_args(
        ["--ckpt", "log/x/ckpt-3", "--download", "--n", "7", "--preset", "multi30k"],
        extra={"ckpt": "", "download": False, "n": 0},
    )
    assert extra["ckpt"] == "log/x/ckpt-3"
    assert extra["download"] is True  # bare switch followed by another option
    assert extra["n"] == 7
    assert hp.corpus == "parallel"
    _, extra = cli.parse_args(["--force"], extra={"force": False})
    assert extra["force"] is True  # bare switch at the very end
    _, extra = cli.parse_args(["--force", "no"], extra={"force": True})
    assert extra["force"] is False
    with pytest.raises(hparams.UserError, match="--n expects int"):
        cli.parse_args(["--n", "x"], extra={"n": 0})


@pytest.mark.parametrize(
    "argv, key",
    [
        (["--num_blocks", "3.5"], "num_blocks"),
        (["--d_model=abc"], "d_model"),
        (["--share_embeddings", "maybe"], "share_embeddings"),
        (["--dropout_rate", "lots"], "dropout_rate"),
        (["--sinusoid", "perhaps"], "sinusoid"),
    ],
)
def test_type_errors_name_the_key(argv, key):
    with pytest.raises(hparams.UserError) as e:
        cli.parse_args(argv)
    assert f"--{key}" in str(e.value)


def test_int_error_message_is_specific():
    with pytest.raises(hparams.UserError) as e:
        cli.parse_args(["--num_blocks", "3.5"])
    assert str(e.value) == "--num_blocks expects int, got '3.5'"
    with pytest.raises(hparams.UserError) as e:
        cli.parse_args(["--jit_compile", "maybe"])
    assert str(e.value) == "--jit_compile expects true or false, got 'maybe'"


@pytest.mark.parametrize(
    "text, value",
    [
        ("1", True),
        ("TRUE", True),
        ("yes", True),
        ("on", True),
        ("0", False),
        ("False", False),
        ("no", False),
        ("off", False),
    ],
)
def test_bool_spellings(text, value):
    hp, _ = cli.parse_args(["--share_embeddings", text])
    assert hp.share_embeddings is value


def test_unknown_key_suggests_closest():
    with pytest.raises(hparams.UserError) as e:
        cli.parse_args(["--d_modle", "512"])
    msg = str(e.value)
    assert "unknown option --d_modle" in msg
    assert "did you mean --d_model" in msg
    with pytest.raises(hparams.UserError, match="did you mean --num_heads"):
        cli.parse_args(["--num_head=8"])
    with pytest.raises(hparams.UserError, match="see --help for the list"):
        cli.parse_args(["--zzzzqqqq", "1"])


def test_malformed_command_lines():
    with pytest.raises(hparams.UserError, match="unexpected argument 'foo'"):
        cli.parse_args(["foo"])
    with pytest.raises(hparams.UserError, match="--d_model needs a value"):
        cli.parse_args(["--d_model"])


# ------------------------------------------------------------------------------ validation
def test_choices_validated():
    with pytest.raises(hparams.UserError) as e:
        cli.parse_args(["--norm", "mid"])
    assert "--norm must be one of post, pre" in str(e.value) and "'mid'" in str(e.value)
    for key in ("vocab_type", "position", "lr_schedule", "precision", "corpus"):
        with pytest.raises(hparams.UserError, match=f"--{key} must be one of"):
            cli.parse_args([f"--{key}", "nonsense"])


def test_d_model_divisible_by_num_heads():
    with pytest.raises(hparams.UserError) as e:
        cli.parse_args(["--d_model", "100", "--num_heads", "8"])
    assert "d_model (100)" in str(e.value) and "num_heads (8)" in str(e.value)
    hp, _ = cli.parse_args(["--d_model", "96", "--num_heads", "8"])
    assert hp.d_model == 96


def test_zero_num_heads_is_a_user_error():
    """BUG (hparams.py, apply): `values["d_model"] % values["num_heads"]` raises
    ZeroDivisionError (a traceback) for --num_heads 0 instead of a UserError."""
    with pytest.raises(hparams.UserError):
        cli.parse_args(["--num_heads", "0"])


def test_word_vocab_disables_shared_embeddings():
    hp, _ = cli.parse_args(["--vocab_type", "word", "--share_embeddings", "true"])
    assert hp.vocab_type == "word" and hp.share_embeddings is False


def test_apply_returns_a_copy():
    base = hparams.Hparams()
    hp = hparams.apply(base, {"d_model": 64})
    assert hp.d_model == 64 and base.d_model == 128


# ------------------------------------------------------------------------------ JSON
def test_save_load_round_trip(tmp_path):
    hp, _ = cli.parse_args(
        [
            "--preset",
            "iwslt2016_legacy",
            "--lr",
            "2.5e-4",
            "--seed",
            "7",
            "--data_dir",
            str(tmp_path / "d"),
        ]
    )
    path = tmp_path / "sub" / "hparams.json"
    hparams.save(hp, str(path))
    assert path.exists()
    values = json.loads(path.read_text(encoding="utf-8"))
    assert values == dataclasses.asdict(hp)
    assert list(values) == sorted(values)
    back = hparams.load(str(path))
    assert back == hp
    assert type(back.lr) is float and type(back.seed) is int
    assert type(back.share_embeddings) is bool


def test_a_run_saved_before_positions_were_a_setting_loads_its_sinusoid(tmp_path):
    """The default position is the demo's (xl); a saved run that names neither position
    nor the original's sinusoid flag had the sinusoid, and loads with it."""
    path = tmp_path / "hparams.json"
    values = {"d_model": 64}
    path.write_text(json.dumps(values))
    assert hparams.Hparams().position == "xl"
    assert hparams.load(str(path)).position == "sinusoid"
    for saved, position in (({"sinusoid": False}, "learned"), ({"position": "t5"}, "t5")):
        path.write_text(json.dumps({**values, **saved}))
        assert hparams.load(str(path)).position == position


def test_load_missing_file_mentions_prepro_and_train(tmp_path):
    path = tmp_path / "nope" / "hparams.json"
    with pytest.raises(hparams.UserError) as e:
        hparams.load(str(path))
    msg = str(e.value)
    assert str(path) in msg and "prepro" in msg and "train" in msg


def test_load_invalid_json_and_unknown_keys(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(hparams.UserError, match="not valid hparams JSON"):
        hparams.load(str(bad))
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"d_model": 64, "flux_capacitor": 1}), encoding="utf-8")
    with pytest.raises(hparams.UserError, match="unknown hyperparameter 'flux_capacitor'"):
        hparams.load(str(newer))
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"d_model": 64, "num_heads": 2}), encoding="utf-8")
    hp = hparams.load(str(partial))
    assert hp.d_model == 64 and hp.num_heads == 2 and hp.d_ff == hparams.Hparams().d_ff


def test_check_same():
    a = hparams.Hparams()
    b = hparams.apply(a, {"vocab_size": 2000, "d_model": 64})
    hparams.check_same(a, b, ("corpus", "src_lang"), "here", "do X")  # no difference: no error
    with pytest.raises(hparams.UserError) as e:
        hparams.check_same(a, b, hparams.DATA_KEYS, "the vocabulary in P", "rerun prepro.py")
    msg = str(e.value)
    assert msg == (
        "the vocabulary in P was built with vocab_size=1000 (you asked for 2000); rerun prepro.py"
    )


# ------------------------------------------------------------------------------ run_main
def test_run_main_user_error_exits_2_with_one_line(capsys):
    def main():
        raise hparams.UserError("the thing is missing")

    with pytest.raises(SystemExit) as e:
        cli.run_main(main)
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.err == "error: the thing is missing\n"
    assert captured.out == ""


def test_run_main_passes_success_and_bugs(capsys):
    calls = []
    cli.run_main(lambda: calls.append(1))
    assert calls == [1]

    def buggy():
        raise ValueError("a real bug")

    with pytest.raises(ValueError):  # bugs keep their traceback
        cli.run_main(buggy)


def test_run_main_with_parse_args_error(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "--d_modle", "3"])
    with pytest.raises(SystemExit) as e:
        cli.run_main(lambda: cli.parse_args())
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown option --d_modle")
    assert "did you mean --d_model" in err


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("warmup_steps", "0", "positive integer"),
        ("pad_multiple", "0", "positive integer"),
        ("beam_size", "0", "positive integer"),
        ("max_len_extra", "-20", "must not be negative"),
        ("dropout_rate", "1.5", r"\[0, 1\)"),
        ("label_smoothing", "-0.1", r"\[0, 1\)"),
        ("embedding_dropout", "1.0", r"\[0, 1\), or negative to follow dropout_rate"),
        ("residual_dropout", "2", r"\[0, 1\), or negative to follow dropout_rate"),
        ("layer_norm_epsilon", "0", "must be positive"),
        ("qkv_activation", "gelu", "must be one of none, relu"),
        ("embedding_init", "he", "must be one of normal, xavier"),
        ("lr", "0", "--lr must be positive"),
        ("lr", "-0.001", "--lr must be positive"),
        ("adam_epsilon", "0", "--adam_epsilon must be positive"),
        ("adam_beta1", "1.5", r"--adam_beta1 must be in \[0, 1\); got 1.5"),
        ("adam_beta2", "1", r"--adam_beta2 must be in \[0, 1\)"),
        ("ema_decay", "1", r"--ema_decay must be in \[0, 1\); got 1"),
        ("ema_decay", "-0.5", r"--ema_decay must be in \[0, 1\)"),
        ("clip_norm", "-1", "--clip_norm must not be negative; got -1"),
        ("max_minutes", "-5", "--max_minutes must not be negative"),
        ("length_penalty", "-0.2", "--length_penalty must not be negative"),
        ("act_loss_weight", "-1", "--act_loss_weight must not be negative"),
    ],
)
def test_out_of_range_values_are_user_errors(key, value, expected):
    with pytest.raises(hparams.UserError, match=expected):
        cli.parse_args([f"--{key}", value])


FLOATS = [
    f.name for f in hparams.FIELDS.values() if isinstance(getattr(hparams.Hparams(), f.name), float)
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_setting_must_be_finite(value):
    """NaN passes every comparison, so each float setting is checked for it by name."""
    assert {"lr", "adam_beta1", "adam_epsilon", "clip_norm", "ema_decay"} <= set(FLOATS)
    for key in FLOATS:
        with pytest.raises(hparams.UserError, match=f"^--{key} must be a finite number; got"):
            cli.parse_args([f"--{key}={value}"])


# -------------------------------------------------------------------- one declaration each
def outside(limits: checks.Range, integer: bool) -> list:
    """A value just past each end of ``limits`` (past the lower end only where negative
    values are not let through)."""
    step = 1 if integer else 0.5
    values = []
    if limits.at_least is not None and not limits.negative:
        values.append(limits.at_least - step)
    if limits.above is not None:
        values.append(limits.above)
    if limits.at_most is not None:
        values.append(limits.at_most + step)
    if limits.below is not None:
        values.append(limits.below)
    return [int(v) if integer else float(v) for v in values]


def test_each_declared_range_is_what_apply_refuses():
    """Every range declared in hparams.py refuses the values just past its ends, with the
    message the declaration gives, and takes its ends where they are inclusive."""
    assert len(hparams.RANGES) > 40
    default = hparams.Hparams()
    for name, limits in hparams.RANGES.items():
        assert hparams.FIELDS[name].metadata["range"] is limits
        integer = isinstance(getattr(default, name), int)
        assert outside(limits, integer), name
        for value in outside(limits, integer):
            with pytest.raises(hparams.UserError) as e:
                hparams.apply(default, {name: value})
            assert str(e.value) == f"--{name} {limits.rule(integer)}; got {checks.shown(value)}"
        for end in (limits.at_least, limits.at_most):
            assert end is None or limits.admits(end), name


@dataclasses.dataclass
class Declared:
    """Settings declared as hparams.py declares its own: each range, and the groups with
    their places."""

    n: int = hparams.setting(2, "n", section="data", at_least=1, groups=("decode", "resume"))
    p: float = hparams.setting(
        0.5, "p", section="data", above=0, at_most=1, groups=("decode",), order={"decode": 2}
    )
    r: float = hparams.setting(
        -1.0, "r", section="model", at_least=0, below=1, negative="to follow p", groups=("model",)
    )
    k: int = hparams.setting(
        1, "k", section="model", at_least=0, note="0: all", groups=("model", "decode")
    )
    m: str = hparams.setting("x", "m", section="model", choices=("x", "y"), order={"choices": 1})
    q: str = hparams.setting("u", "q", section="model", choices=("u", "v"), groups=("model",))


@pytest.mark.parametrize(
    "values,message",
    [
        ({"n": 0}, "--n must be a positive integer; got 0"),
        ({"p": 0.0}, "--p must be in (0, 1]; got 0"),
        ({"p": 1.5}, "--p must be in (0, 1]; got 1.5"),
        ({"r": 1.0}, "--r must be in [0, 1), or negative to follow p; got 1"),
        ({"k": -1}, "--k must not be negative (0: all); got -1"),
        ({"n": 0, "p": 2.0}, "--n must be a positive integer; got 0"),  # the first declared
        ({"p": float("nan")}, "--p must be a finite number; got nan"),
    ],
)
def test_a_declared_range_is_checked_with_its_message(values, message):
    ranges = hparams.declared_ranges(Declared)
    assert set(ranges) == {"n", "p", "r", "k"}
    with pytest.raises(hparams.UserError) as e:
        checks.check_ranges({**dataclasses.asdict(Declared()), **values}, ranges)
    assert str(e.value) == message


def test_a_declared_range_takes_its_ends_and_its_negatives():
    ranges = hparams.declared_ranges(Declared)
    for values in ({"n": 1, "p": 1.0, "r": 0.0, "k": 0}, {"r": -3.0}, {}):
        checks.check_ranges({**dataclasses.asdict(Declared()), **values}, ranges)


def test_the_key_tuples_are_derived_from_the_declarations():
    """Each group is its members in the order of their places (``order``), ties in the order
    of declaration; CHOICES likewise. MODEL_KEYS is the group "checkpoint" and then the
    ModelConfig fields that are not training-only."""
    assert hparams.members("decode", Declared) == ("n", "k", "p")
    assert hparams.members("resume", Declared) == ("n",)
    assert hparams.members("model", Declared) == ("r", "k", "q")
    assert hparams.members("data", Declared) == ()
    assert list(hparams.declared_choices(Declared).items()) == [
        ("q", ("u", "v")),
        ("m", ("x", "y")),
    ]
    assert hparams.help_groups(Declared) == {"n": "data", "r": "model (paper section 3)"}
    # the model's fields are the declarations of the two model groups, in declaration order
    config = [f.name for f in dataclasses.fields(hparams.ModelConfig)][2:]
    assert config == [
        k
        for k, f in hparams.FIELDS.items()
        if {"model", "training_only"} & set(f.metadata["groups"])
    ]
    assert hparams.MODEL_KEYS == hparams.members("checkpoint") + tuple(
        k for k in config if k not in hparams.members("training_only")
    )


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(groups=("decoding",)), r"unknown groups \['decoding'\] \(known: data, checkpoint"),
        (dict(groups=("decode",), order={"resume": 1}), r"in \['resume'\], which it is not in"),
        (dict(order={"choices": 1}), r"in \['choices'\], which it is not in"),
        (dict(groups=("model", "training_only")), "changes the model or is training-only"),
        (dict(note="0: all"), "negative and note describe a range"),
        (dict(at_least=0, above=0), "one lower end"),
        (dict(at_most=1, below=1), "one upper end"),
    ],
)
def test_a_declaration_that_contradicts_itself_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        hparams.setting(1, "a setting", section="data", **kwargs)
