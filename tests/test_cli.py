"""cli.py: --help built from the Hparams dataclass, two-phase parsing, no TensorFlow before
the help, and the quiet start (filtered C++ start-up lines) on a CPU-only machine."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

import average_checkpoints
import eval as eval_script
import export
import plot_logs
import prepro
import scripts_of
import train
import translate
from helpers import ROOT, run_json_script
from transformer_tf2.config import cli, hparams, presets
from transformer_tf2.config.hparams import UserError
from transformer_tf2.utils import quiet_start

SCRIPTS = {
    "train": train,
    "prepro": prepro,
    "eval": eval_script,
    "translate": translate,
    "export": export,
    "average_checkpoints": average_checkpoints,
    "plot_logs": plot_logs,
}


def help_text(script, argv=(), capsys=None) -> str:
    with pytest.raises(SystemExit) as e:
        cli.parse_args([*argv, "--help"], script=script.SCRIPT)
    assert e.value.code == 0
    return capsys.readouterr().out


def option_line(text: str, name: str) -> str:
    """The help of --name, its wrapped lines joined."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"--{name} "))
    out = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 10):  # continuation lines are indented deeper
            break
        out.append(line)
    return " ".join(" ".join(out).split())


# ------------------------------------------------------------------- hparams declarations
def test_every_field_and_preset_has_help_and_a_section():
    docs = cli.field_docs()
    names = [f.name for f in dataclasses.fields(hparams.Hparams)]
    assert list(docs.help) == names
    missing = [n for n in names if len(docs.help[n]) < 8]
    assert missing == [], f"fields without a help text in hparams.py: {missing}"
    assert list(docs.sections) == [
        "data",
        "vocabulary",
        "batching",
        "model",
        "training",
        "decoding",
    ]
    assert sum(docs.sections.values(), []) == names  # each field once, in declaration order
    assert docs.titles["model"] == "model (paper section 3)"
    assert list(docs.presets) == list(hparams.PRESETS)
    assert all(len(text) > 10 for text in docs.presets.values()), docs.presets
    # the help text is the declaration's, not a comment read from the source
    assert docs.help["d_model"] == hparams.FIELDS["d_model"].metadata["help"]
    assert docs.help["d_model"].startswith("width of every layer")


@dataclasses.dataclass
class Small:
    """Three settings declared as hparams.py declares its own."""

    a: int = hparams.setting(1, "the a", section="data")
    b: str = hparams.setting("x", "the b", section="data", choices=("x", "y"))
    c: float = hparams.setting(0.5, "the c", section="model", above=0)


def test_help_and_sections_are_read_from_the_declarations():
    docs = cli.field_docs(Small)
    assert docs.help == {"a": "the a", "b": "the b", "c": "the c"}
    assert docs.sections == {"data": ["a", "b"], "model": ["c"]}
    assert docs.titles == {"data": "data", "model": "model (paper section 3)"}
    assert hparams.help_groups(Small) == {"a": "data", "c": "model (paper section 3)"}
    assert docs.presets == presets.DESCRIPTIONS


def test_a_field_without_help_or_section_is_an_error():
    """A field declared without hparams.setting (or with an empty help text) has no --help
    text and no section: reading the declarations names it."""

    @dataclasses.dataclass
    class Bare:
        a: int = hparams.setting(1, "the a", section="data")
        d: int = 3

    with pytest.raises(ValueError, match=r"Bare\.d needs a declaration setting\(default, help"):
        cli.field_docs(Bare)

    @dataclasses.dataclass
    class Silent:
        e: int = hparams.setting(1, "  ", section="data")

    with pytest.raises(ValueError, match=r"Silent\.e needs"):
        hparams.members("data", Silent)
    with pytest.raises(ValueError, match=r"unknown section 'nowhere' \(known: data, vocab"):
        hparams.setting(1, "the f", section="nowhere")


def test_a_sections_fields_are_declared_together():
    """--help groups a section's fields under one heading: a section split by another
    one is an error, not a second heading."""

    @dataclasses.dataclass
    class Split:
        a: int = hparams.setting(1, "the a", section="data")
        b: int = hparams.setting(2, "the b", section="model")
        c: int = hparams.setting(3, "the c", section="data")

    with pytest.raises(ValueError, match=r"Split\.c: the fields of section 'data' are not"):
        cli.field_docs(Split)


# ---------------------------------------------------------------------------------- help
def test_train_help_lists_every_hyperparameter_with_type_default_and_help(capsys):
    text = help_text(train, capsys=capsys)
    assert text.startswith("usage: python train.py [--preset NAME] [--name value ...]")
    assert "Train the Transformer: Adam + a learning-rate schedule" in text  # its own description
    line = option_line(text, "d_model")
    assert line == ("--d_model INT width of every layer's input and output (3.1) (default: 128)")
    assert option_line(text, "norm").startswith("--norm {post,pre} post (paper) | pre")
    for name, field in hparams.FIELDS.items():  # each with its declaration's help text
        # (argparse may wrap a line after a hyphen: compare without the spaces)
        assert "".join(field.metadata["help"].split()) in "".join(option_line(text, name).split())
    for title in ("data", "vocabulary", "batching", "model (paper section 3)", "decoding"):
        assert f"hyperparameters: {title}:" in text
    assert "presets (--preset NAME):" in text
    for name, comment in cli.field_docs().presets.items():
        assert f"  {name:<18} {comment}" in text
    assert "--verbose [BOOL]" in text


def test_preset_help_shows_the_presets_defaults(capsys):
    text = help_text(train, ["--preset", "multi30k", "--lr", "0.001"], capsys)
    assert option_line(text, "d_model").endswith("(default: 256, from preset multi30k)")
    assert option_line(text, "vocab_size").endswith("(default: 8000, from preset multi30k)")
    assert option_line(text, "position").endswith("(default: 'xl')")
    assert option_line(text, "lr").endswith("(this command: 0.001, from the command line)")
    # the preset may come after --help too
    with pytest.raises(SystemExit):
        cli.parse_args(["--help", "--preset=iwslt2016"], script=train.SCRIPT)
    out = capsys.readouterr().out
    assert option_line(out, "d_model").endswith("(default: 512, from preset iwslt2016)")
    assert option_line(out, "position").endswith("(default: 'sinusoid', from preset iwslt2016)")


def test_an_edit_of_hparams_py_is_what_train_py_runs_and_shows(tmp_path):
    """A value set in the root hparams.py is the run's (the demo preset adds nothing): in
    a copy of the project whose hparams.py says position = "t5", train.py's --help shows
    t5 from hparams.py, and its settings are t5."""
    for name in os.listdir(ROOT):
        if name.endswith(".py"):
            shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    shutil.copytree(os.path.join(ROOT, "transformer_tf2"), tmp_path / "transformer_tf2")
    with open(tmp_path / "hparams.py", "a", encoding="utf-8") as f:
        f.write('position = "t5"\n')
    help_out = subprocess.run(
        [sys.executable, "train.py", "--help"], cwd=tmp_path, capture_output=True, text=True
    ).stdout
    assert option_line(help_out, "position").endswith("(default: 't5', from hparams.py)")
    code = (
        f"import sys; sys.path.append({os.path.join(ROOT, 'tests')!r}); import scripts_of; "
        "from transformer_tf2.config import cli; "
        "print(cli.parse_args([], script=scripts_of.script_of('train', '.'))[0].position)"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert ran.stdout.strip().splitlines()[-1] == "t5", ran.stderr[-2000:]


def test_prepro_help_lists_what_prepro_uses(capsys):
    text = help_text(prepro, capsys=capsys)
    assert "--vocab_size INT" in text and "--data_dir STR" in text
    assert "--download [BOOL]" in text and "fetch the IWSLT 2016 archive" in text
    assert "--d_model" not in text and "--beam_size" not in text
    assert "prepro.py does not use them" in text


@pytest.mark.parametrize("script", [eval_script, translate, export])
def test_decoding_scripts_list_their_decoding_options(script, capsys):
    text = help_text(script, capsys=capsys)
    listed = hparams.DECODE_KEYS + ("logdir",) if script is not export else cli.EXPORT_FIELDS
    for name in listed + ("ckpt",):
        assert f"--{name} " in text, name
    assert "--d_model" not in text and "--lr " not in text
    assert "<logdir>/hparams.json" in " ".join(text.split())
    if script is export:  # a SavedModel searches; it neither samples nor batches
        for name in ("sampling_topk", "sampling_topp", "sampling_temperature", "seed"):
            assert f"--{name} " not in text, name


def test_help_of_a_decoding_script_shows_the_values_of_the_run(tmp_path, capsys, monkeypatch):
    """eval.py --logdir RUN --help shows the run's own decoding settings (a run trained with
    beam_size 3), each with its source; the command line and the user's hparams.py win
    over the run's, and what they set is passed on to the run's loading (``_set``)."""
    values = dataclasses.asdict(hparams.apply(hparams.Hparams(), {"beam_size": 3}))
    values["length_penalty"] = 1.0
    (tmp_path / "hparams.json").write_text(json.dumps(values))
    run = ["--logdir", str(tmp_path)]
    text = help_text(eval_script, run, capsys)
    assert option_line(text, "beam_size").endswith("(default: 3, from the run's hparams.json)")
    assert option_line(text, "length_penalty").endswith(
        "(default: 1.0, from the run's hparams.json)"
    )
    text = help_text(translate, [*run, "--beam_size", "5"], capsys)
    assert option_line(text, "beam_size").endswith("(this command: 5, from the command line)")
    hp, opts = cli.parse_args(run, script=translate.SCRIPT)
    assert hp.beam_size == 3 and "beam_size" not in opts["_set"]  # what translate.py checks
    monkeypatch.setattr(cli, "user_values", lambda folder=None: {"length_penalty": 0.2})
    text = help_text(eval_script, run, capsys)
    assert option_line(text, "length_penalty").endswith("(default: 0.2, from hparams.py)")
    hp, opts = cli.parse_args(run, script=eval_script.SCRIPT)
    assert hp.length_penalty == 0.2 and "length_penalty" in opts["_set"]
    assert hp.beam_size == 3
    empty = tmp_path / "none"
    assert cli.parse_args(["--logdir", str(empty)], script=eval_script.SCRIPT)[0].beam_size == 1


def test_translate_options_have_their_own_help(capsys):
    text = help_text(translate, capsys=capsys)
    assert option_line(text, "n_best").startswith("--n_best INT print N translations of each")
    assert option_line(text, "n_best").endswith("(default: 1)")


def test_every_script_declares_itself():
    for name, module in SCRIPTS.items():
        assert module.SCRIPT.name == name
        assert module.SCRIPT.doc == module.__doc__
        for field in module.SCRIPT.fields:
            assert field in cli.field_docs().sections or field in hparams.FIELDS, (name, field)


# ------------------------------------------------------------------------------- parsing
def test_abbreviations_are_errors_not_matches():
    with pytest.raises(hparams.UserError) as e:
        cli.parse_args(["--d_mod", "512"], script=train.SCRIPT)
    assert str(e.value) == "unknown option --d_mod; did you mean --d_model?"
    with pytest.raises(hparams.UserError) as e:
        cli.parse_args(["--n_be=2"], script=translate.SCRIPT)  # script options are suggested too
    assert str(e.value) == "unknown option --n_be; did you mean --n_best?"


def test_script_options_and_switches():
    hp, opts = cli.parse_args(
        ["--n_best", "3", "--beam_size=4", "--verbose", "--logdir", "x"], script=translate.SCRIPT
    )
    assert opts["n_best"] == 3 and opts["verbose"] is True and opts["ckpt"] == ""
    assert hp.beam_size == 4 and hp.logdir == "x" and opts["_set"] == {"beam_size", "logdir"}
    _, opts = cli.parse_args(["--verbose", "false"], script=translate.SCRIPT)
    assert opts["verbose"] is False
    hp, _ = cli.parse_args(["--jit_compile"], script=train.SCRIPT)  # a bare bool is true
    assert hp.jit_compile is True
    with pytest.raises(hparams.UserError, match="--max_len_extra must not be negative"):
        cli.parse_args(["--max_len_extra", "-3"], script=eval_script.SCRIPT)


# --------------------------------------------------------------- before TensorFlow loads
def test_help_and_option_errors_come_before_tensorflow():
    """Every script answers --help (and a misspelt option) without importing TensorFlow."""
    code = (
        "import json, runpy, sys\n"
        "out = {}\n"
        "for name, argv in json.loads(sys.argv[1]):\n"
        "    sys.argv = [name + '.py'] + argv\n"
        "    try:\n"
        "        runpy.run_path(name + '.py', run_name='__main__')\n"
        "    except SystemExit as e:\n"
        "        out[name + ' '.join(argv)] = [e.code, 'tensorflow' in sys.modules]\n"
        "print(json.dumps(out))\n"
    )
    bad = [["--d_modle", "3"], ["--lr", "nan"], ["--adam_beta1", "1.5"], ["--clip_norm", "-1"]]
    # the checks of a combination (config/families.py) come before TensorFlow too
    combined = [
        ["prepro", ["--position", "sinusoid", "--memory_sentences", "1"]],
        ["train", ["--position", "alibi_dir", "--num_heads", "1"]],
        ["eval", ["--position", "rotary", "--d_model", "12", "--num_heads", "4"]],
        ["translate", ["--position", "learned", "--position_add_absolute"]],
    ]
    cases = [[name, ["--help"]] for name in SCRIPTS] + [["train", argv] for argv in bad] + combined
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(cases)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {
        **{f"{name}--help": [0, False] for name in SCRIPTS},
        **{"train" + " ".join(argv): [2, False] for argv in bad},
        **{name + " ".join(argv): [2, False] for name, argv in combined},
    }
    relative = "pick one of shaw, t5, xl, alibi, alibi_dir, rotary"
    assert proc.stderr.strip().splitlines() == [
        "error: unknown option --d_modle; did you mean --d_model?",
        "error: --lr must be a finite number; got nan",
        "error: --adam_beta1 must be in [0, 1); got 1.5",
        "error: --clip_norm must not be negative; got -1",
        "error: memory_sentences=1 places the earlier sentences at negative relative "
        f"positions; position=sinusoid is absolute: {relative}",
        "error: position=alibi_dir splits the encoder's heads into left- and right-looking "
        "halves: it needs num_heads >= 2; got 1",
        "error: position=rotary rotates pairs of dimensions: d_model / num_heads (12 / 4) "
        "must be even",
        "error: --position_add_absolute adds the sinusoid to a relative family; "
        f"position=learned is absolute already: drop it or {relative}",
    ]


# ---------------------------------------------------------------------------- quiet start
NOISE_LINES = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    b"I0000 00:00:1795419285.815746   23265 port.cc:153] oneDNN custom operations are on. "
    b"You may see slightly different numerical results due to floating-point round-off errors",
    b"I0000 00:00:1795419285.816093   23265 cudart_stub.cc:31] Could not find cuda drivers on "
    b"your machine, GPU will not be used.",
    b"E0000 00:00:1795419288.144437   23265 cuda_platform.cc:52] failed call to cuInit: "
    b"INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    b"I0000 00:00:1795419285.909107   23265 cpu_feature_guard.cc:227] This TensorFlow binary "
    b"is optimized to use available CPU instructions in performance-critical operations.",
    b"To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    b"TensorFlow with the appropriate compiler flags.",
]
KEPT_LINES = [
    b"train: TensorFlow sees /physical_device:CPU:0 (CPU); running on the CPU",
    b"E0000 00:00:1795419288.144437   23265 cuda_executor.cc:52] CUDA_ERROR_OUT_OF_MEMORY",
    b"W0000 00:00:1795419288.1   23265 op_kernel.cc:1] OP_REQUIRES failed: not the start-up",
    b"WARNING: something else",
    b"Traceback (most recent call last):",
]


def test_noise_lines_are_exactly_the_known_ones():
    assert all(quiet_start.is_noise(line) for line in NOISE_LINES)
    assert not any(quiet_start.is_noise(line) for line in KEPT_LINES)


def test_filter_stream_drops_noise_and_passes_the_rest_at_once():
    read_fd, write_fd = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write_fd)
        os.close(out_r)
        quiet_start.filter_stream(read_fd, out_w)
        os._exit(0)
    os.close(read_fd)
    os.close(out_w)
    # a progress bar's unfinished line passes before its newline arrives
    os.write(write_fd, b"\repoch 1/3:  10%|#")
    assert os.read(out_r, 100) == b"\repoch 1/3:  10%|#"
    stream = [NOISE_LINES[0], KEPT_LINES[0], NOISE_LINES[3], KEPT_LINES[1], NOISE_LINES[4]]
    data = b"\n" + b"\n".join(stream) + b"\n" + NOISE_LINES[5] + b"\n" + KEPT_LINES[2] + b"\nlast"
    for i in range(0, len(data), 7):  # lines split across writes
        os.write(write_fd, data[i : i + 7])
    os.close(write_fd)
    got = b""
    while chunk := os.read(out_r, 4096):
        got += chunk
    os.waitpid(pid, 0)
    assert got == b"\n" + KEPT_LINES[0] + b"\n" + KEPT_LINES[1] + b"\n" + KEPT_LINES[2] + b"\nlast"


START = (
    "import sys\nfrom transformer_tf2.config import cli\n"
    "cli.start(cli.Script('probe', 'Probe.', fields=('logdir',)), sys.argv[1:])\n"
    "import tensorflow as tf\n"
    "print('devices', len(tf.config.list_physical_devices()), file=sys.stderr)\n"
    "print('out', flush=True)\n"
    "raise SystemExit(3)\n"
)


# TensorFlow turns its oneDNN operations on, and prints its notice, only on some x86 CPUs
# (on an AMD EPYC it does not); asking for them makes every CPU print the notice.
ONEDNN_ON = {"TF_ENABLE_ONEDNN_OPTS": "1"}


def start_probe(*argv, **env):
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",)}
    environ.pop("CUDA_VISIBLE_DEVICES", None)
    environ.update(ONEDNN_ON, **env)
    return subprocess.run(
        [sys.executable, "-c", START, *argv],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_quiet_start_on_a_cpu_only_machine():
    """No cuInit error and no oneDNN notice on a CPU-only machine; --verbose shows them; the
    exit status and the rest of stderr pass through the filter; with an NVIDIA device (here
    CUDA_VISIBLE_DEVICES) nothing is filtered."""
    assert not quiet_start.gpu_present(), "this test runs on a machine without an NVIDIA device"
    quiet = start_probe()
    assert quiet.returncode == 3 and quiet.stdout == "out\n"
    assert quiet.stderr == "devices 1\n"
    loud = start_probe("--verbose")
    assert loud.returncode == 3 and "devices 1\n" in loud.stderr
    assert "cuInit" in loud.stderr and "oneDNN custom operations are on" in loud.stderr
    gpu = start_probe(CUDA_VISIBLE_DEVICES="")
    assert "oneDNN custom operations are on" in gpu.stderr  # nothing filtered


@pytest.mark.slow
def test_a_real_script_starts_quietly(quick_run):
    """translate.py on a trained run: only its own lines on stderr, the device summary
    named after it (its --verbose goes through the same cli.start as the probe's above)."""
    hp, _ = quick_run
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environ.update(ONEDNN_ON)
    proc = subprocess.run(
        [sys.executable, "translate.py", "--logdir", hp.logdir],
        cwd=ROOT,
        env=environ,
        input="Der Hund schläft.\n",
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    lines = proc.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["translate"] * 2, lines
    assert lines[0].startswith("translate: TensorFlow sees /physical_device:CPU:0")
    assert lines[1].startswith(f"translate: model {hp.logdir}/")


def test_onednn_is_turned_on_on_x86_unless_the_user_chose():
    env = {}
    cli.default_onednn(env, machine="x86_64")
    assert env == {"TF_ENABLE_ONEDNN_OPTS": "1"}
    env = {"TF_ENABLE_ONEDNN_OPTS": "0"}
    cli.default_onednn(env, machine="AMD64")
    assert env == {"TF_ENABLE_ONEDNN_OPTS": "0"}  # the user's choice stays
    env = {}
    cli.default_onednn(env, machine="aarch64")
    assert env == {}  # elsewhere TensorFlow decides


def test_every_script_parser_builds_without_tensorflow():
    """scripts_of.parser(NAME) reads each script's SCRIPT from its source and builds the parser
    its --help prints, in a process that never imports TensorFlow; parse_args with that
    Script accepts a documented command and names a misspelt option's closest match."""
    code = (
        "import sys\nsys.path.insert(0, 'tests')\nimport scripts_of\n"
        "from transformer_tf2.config import cli\n"
        "names = [scripts_of.parser(n).prog for n in scripts_of.SCRIPTS]\n"
        "hp, opts = cli.parse_args(['--preset', 'multi30k', '--max_steps', '3'],"
        " script=scripts_of.script_of('train'))\n"
        "assert hp.max_steps == 3 and opts['_preset'] == 'multi30k'\n"
        "try:\n"
        "    cli.parse_args(['--beam_sise', '4'], script=scripts_of.script_of('eval'))\n"
        "except cli.UserError as e:\n"
        "    names.append(str(e))\n"
        "import demo.corpus\n"
        "names.append(demo.corpus.parser().parse_args(['--n_train', '5']).n_train)\n"
        "print(names, 'tensorflow' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    progs = [f"'python {name}.py'" for name in scripts_of.SCRIPTS]
    misspelt = "'unknown option --beam_sise; did you mean --beam_size?'"
    assert out == f"[{', '.join(progs + [misspelt, '5'])}] False"


def test_the_users_hparams_py_sets_values_under_a_preset_and_says_what_is_wrong(tmp_path):
    """The root hparams.py's plain assignments are the defaults of every script: a preset
    that sets the same name wins, the command line wins over both, and --help names the
    file; a name that is no setting, a statement that is no assignment or a value that is
    no plain value is one UserError naming the file and the line."""
    (tmp_path / "hparams.py").write_text('"""Mine."""\nd_model = 64\nvocab_size = 500\n_x = 1\n')
    assert cli.user_values(str(tmp_path)) == {"d_model": 64, "vocab_size": 500}
    user = cli.user_values(str(tmp_path))
    assert hparams.preset("demo", user).d_model == 64
    assert hparams.preset("multi30k", user).vocab_size == 8000  # the preset sets it
    assert hparams.preset("multi30k", user).d_model == 256
    assert cli.sources("demo", {"num_blocks"}, user)["d_model"] == "hparams.py"
    assert cli.sources("demo", {"num_blocks"}, user)["num_blocks"] == "the command line"
    assert cli.sources("demo", (), user)["num_heads"] == ""
    assert cli.user_values(str(tmp_path / "nowhere")) == {}
    for text, why in [
        (
            "d_modle = 64\n",
            r"hparams.py, line 1: unknown setting 'd_modle'; did you mean --d_model",
        ),
        ("x = y = 1\n", r"line 1: only plain assignments"),
        ("import os\n", r"line 1: only plain assignments"),
        ("d_model = 2 ** 6\n", r"line 1: d_model must be a plain value"),
        ("d_model = \n", r"hparams.py, line 1: invalid syntax"),
    ]:
        (tmp_path / "hparams.py").write_text(text)
        with pytest.raises(UserError, match=why):
            cli.user_values(str(tmp_path))


def test_the_shipped_hparams_py_sets_nothing_the_defaults_do_not():
    """The repository's hparams.py is the user's file: as shipped, every script runs the
    declared defaults (the demo), so --help and the docs' figures hold."""
    assert cli.user_values() == {}


PYPLOT = """
import json, sys
import transformer_tf2, keras
import tensorflow as tf
from transformer_tf2.decoding import greedy_search, plots
# a function AutoGraph converts: it reads every module's __file__ in sys.modules
tf.function(greedy_search.argmax)(tf.zeros([1, 3]), 0, None)
import importlib.util  # the real module's spec, found without loading it
found = importlib.util.find_spec("matplotlib.pyplot").origin.endswith("pyplot.py")
loaded = [name for name in ("matplotlib.figure", "matplotlib.backend_bases") if name in sys.modules]
fig, ax = plots.pyplot().subplots()
import matplotlib
from matplotlib.pyplot import close
close(fig)
print(json.dumps([found, loaded, type(sys.modules["matplotlib.pyplot"]).__name__,
                  matplotlib.get_backend(), keras.visualization.plot_image_gallery.__name__]))
"""


@pytest.mark.slow
def test_keras_loads_without_pyplot_and_pyplot_loads_at_the_first_figure():
    """Keras imports matplotlib.pyplot as it loads (0.35 s of every script's start):
    after the package, it finds a module that loads pyplot only when something reads from
    it, so nothing of pyplot is loaded with Keras, nor as AutoGraph converts a function
    (it reads every module's ``__file__``), nor by ``importlib.util.find_spec``; the
    first figure loads the real one, on the Agg backend the figures choose."""
    assert run_json_script(PYPLOT) == [True, [], "module", "Agg", "plot_image_gallery"]
