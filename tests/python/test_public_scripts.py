"""Public training scripts run unmodified under `stepwatch run` (issue 27): Hugging Face's
examples/pytorch/language-modeling/run_clm.py (the Trainer), with nothing downloaded: a tiny
GPT-2 config and a word-level tokenizer saved here, a local train file, HF_HUB_OFFLINE=1 and
HF_DATASETS_OFFLINE=1 (--do_train only: its evaluation loads a metric from the hub).

The script is not in this repository and is fetched by nothing here: the test takes it from
$STEPWATCH_HF_EXAMPLES (a checkout's examples/pytorch folder, or a folder holding
language-modeling/run_clm.py; /work/peers/transformers-examples by default) and skips,
saying so, where it is absent (CI).

What must hold: the script ends as it does alone; stepwatch's train steps equal the
Trainer's global_step (its trainer_state.json), their samples the script's own
train_samples (its train_results.json), batch by batch (a last partial batch too), and the
steps' time is the Trainer's own train_runtime, give or take 10 %."""
import json
import os
import random
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import stepwatch  # noqa: E402

EXAMPLES = os.environ.get("STEPWATCH_HF_EXAMPLES", "/work/peers/transformers-examples")
RUN_CLM = os.path.join(EXAMPLES, "language-modeling", "run_clm.py")
BATCH, BLOCK, LINES, WORDS_PER_LINE = 4, 32, 44, 16


def tiny_gpt2(folder):
    """A 2-layer GPT-2 config and a word-level tokenizer over a made-up vocabulary, saved
    as the script's --config_name and --tokenizer_name."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, PreTrainedTokenizerFast
    words = [f"w{i}" for i in range(60)]
    vocab = {w: i for i, w in enumerate(["[UNK]", "[EOS]"] + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]",
                            model_max_length=BLOCK).save_pretrained(folder)
    GPT2Config(vocab_size=len(vocab), n_positions=BLOCK, n_embd=32, n_layer=2, n_head=2,
               bos_token_id=1, eos_token_id=1).save_pretrained(folder)
    return words


def test_hf_run_clm_trainer_unmodified(tmp_path, build_dir):
    if not os.path.isfile(RUN_CLM):
        pytest.skip(f"Hugging Face's run_clm.py is not at {RUN_CLM} (set STEPWATCH_HF_EXAMPLES "
                    "to a transformers checkout's examples/pytorch)")
    pytest.importorskip("datasets", reason="run_clm.py needs the datasets package")
    pytest.importorskip("evaluate", reason="run_clm.py imports the evaluate package")
    exe = os.path.join(build_dir or "", "stepwatch")
    if not (build_dir and os.access(exe, os.X_OK)):
        pytest.skip("the C command is not built (SW_BUILD_DIR)")
    words = tiny_gpt2(tmp_path / "tiny")
    rng = random.Random(0)
    with open(tmp_path / "train.txt", "w") as f:
        for _ in range(LINES):
            f.write(" ".join(rng.choice(words) for _ in range(WORDS_PER_LINE)) + "\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    env.pop("STEPWATCH_RUN_FILE", None)
    db = tmp_path / "run.db"
    cmd = [exe, "run", "--run-file", str(db), "--", sys.executable, RUN_CLM,
           "--config_name", "tiny", "--tokenizer_name", "tiny", "--train_file", "train.txt",
           "--do_train", "--per_device_train_batch_size", str(BATCH), "--num_train_epochs", "1",
           "--block_size", str(BLOCK), "--output_dir", "out", "--report_to", "none",
           "--use_cpu", "--save_strategy", "no", "--logging_steps", "2", "--seed", "0"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "***** train metrics *****" in run.stdout, run.stdout[-3000:]
    # the script's own figures: the Trainer's state and the metrics it saved
    global_step = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["global_step"]
    metrics = json.loads((tmp_path / "out" / "train_results.json").read_text())
    samples = metrics["train_samples"]
    steps = [s for s in stepwatch.load_steps(str(db)) if s["phase"] == "train"]
    assert len(steps) == global_step == -(-samples // BATCH), (len(steps), global_step, samples)
    sizes = [s["batch_size"] for s in steps]
    assert sizes == [BATCH] * (samples // BATCH) + ([samples % BATCH] if samples % BATCH else [])
    assert sum(sizes) == samples
    steps_s = sum(s["duration_ns"] for s in steps) / 1e9
    assert 0.9 * metrics["train_runtime"] <= steps_s <= 1.01 * metrics["train_runtime"], \
        (steps_s, metrics["train_runtime"])
    # every step trained: its forward, backward and optimizer are in it
    assert all(s["forward_ns"] > 0 and s["backward_ns"] > 0 and s["optimizer_ns"] > 0
               for s in steps), steps
