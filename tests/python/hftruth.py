"""Ground truth for the Hugging Face loops (tests/python/test_transformers.py): a tiny BERT
built from a config (no download), a Trainer whose parts nap known times and are also timed
by the loop's own timers in the same run (the Trainer's callback events, the collator, the
model's forward, accelerate's backward), and the counts the Trainer itself keeps.

The naps are the same as torchtruth's: long enough (several ms) that a preemption of the
shared machine does not move a category's total by 10 %.
"""
import os
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (BertConfig, BertForSequenceClassification, Trainer,  # noqa: E402
                          TrainerCallback, TrainingArguments)

from torchtruth import SlowBackward  # noqa: E402  (its backward naps 15 ms)

NAP = {"data": 0.020, "forward": 0.015, "optimizer": 0.010}
SEQ = 8
transformers.logging.set_verbosity_error()


def tiny_bert(seed=0):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=SEQ * 2, num_labels=2)
    return NapBert(config)


class NapBert(BertForSequenceClassification):
    """The model naps in its forward (and its backward), timed by its own timer."""

    timer = None  # the Clock of the run

    def forward(self, input_ids=None, labels=None, **kwargs):
        t0 = time.perf_counter_ns()
        time.sleep(NAP["forward"])
        embeds = self.bert.embeddings.word_embeddings(input_ids)
        if torch.is_grad_enabled():
            embeds = SlowBackward.apply(embeds)
        out = super().forward(inputs_embeds=embeds, labels=labels, **kwargs)
        if NapBert.timer is not None:
            NapBert.timer.add("forward", time.perf_counter_ns() - t0)
        return out


class Samples(torch.utils.data.Dataset):
    def __init__(self, n, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 64, (n, SEQ), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


class Collate:
    """The Trainer's data_collator: stacks a batch and naps as the data wait (in the main
    process with num_workers=0: then it is the loop's own timer of the fetch)."""

    def __init__(self, timer=None):
        self.timer = timer

    def __call__(self, items):
        t0 = time.perf_counter_ns()
        time.sleep(NAP["data"])
        batch = {"input_ids": torch.stack([i["input_ids"] for i in items]),
                 "labels": torch.stack([i["labels"] for i in items])}
        if self.timer is not None:
            self.timer.add("data", time.perf_counter_ns() - t0, len(items))
        return batch


class NapSGD(torch.optim.SGD):
    """Times its own step: torch wraps every Optimizer.step in profiler marks outside the
    step hooks, and accelerate in its AcceleratedOptimizer (several ms a step on this
    loaded machine): those are "other", as to a timer inside the step."""

    timer = None

    def step(self, closure=None):
        t0 = time.perf_counter_ns()
        time.sleep(NAP["optimizer"])
        out = super().step(closure)
        if NapSGD.timer is not None:
            NapSGD.timer.ns["train"]["optimizer"] += time.perf_counter_ns() - t0
        return out


class Clock(TrainerCallback):
    """The loop's own timers: ns per category and phase (train until evaluation starts,
    valid inside it), the Trainer's events (evaluation batches: on_prediction_step), and
    the samples each phase consumed."""

    def __init__(self):
        self.ns = {"train": Counter(), "valid": Counter()}
        self.samples = Counter()
        self.batches = Counter()
        self.phase = "train"
        self.valid_steps = 0

    def add(self, category, ns, samples=0):
        self.ns[self.phase][category] += ns
        if samples:
            self.samples[self.phase] += samples
            self.batches[self.phase] += 1

    def on_prediction_step(self, args, state, control, **kw):
        self.valid_steps += 1

    def on_step_end(self, args, state, control, **kw):
        self.phase = "valid"  # until the next batch of training: evaluation may follow

    def on_step_begin(self, args, state, control, **kw):
        self.phase = "train"

    def on_evaluate(self, args, state, control, **kw):
        self.phase = "train"


class TimedTrainer(Trainer):
    """The Trainer with its own timers around the fetch of an update's batches (with
    workers: the wait) and accelerate's backward."""

    clock = None

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        self.clock.phase = "train"
        return super().get_batch_samples(epoch_iterator, num_batches, device)

    def training_step(self, model, inputs, num_items_in_batch=None):
        backward = self.accelerator.backward
        clock = self.clock

        def timed(loss, **kwargs):
            t0 = time.perf_counter_ns()
            backward(loss, **kwargs)
            clock.ns["train"]["backward"] += time.perf_counter_ns() - t0
        self.accelerator.backward = timed
        try:
            return super().training_step(model, inputs, num_items_in_batch)
        finally:
            del self.accelerator.backward


def make_trainer(tmp_path, *, accumulation=1, workers=0, eval_steps=0, epochs=2, train=48,
                 valid=16, batch=8, callbacks=(), logging_steps=0, report_to="none"):
    clock = Clock()
    NapBert.timer = NapSGD.timer = clock
    torch.set_num_threads(1)  # a tiny model: threads only contend on the shared machine
    model = tiny_bert()
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=batch,
        per_device_eval_batch_size=batch, gradient_accumulation_steps=accumulation,
        num_train_epochs=epochs, dataloader_num_workers=workers,
        eval_strategy="steps" if eval_steps else "no", eval_steps=eval_steps or None,
        logging_strategy="steps" if logging_steps else "no", logging_steps=logging_steps or 500,
        save_strategy="no", report_to=report_to, disable_tqdm=True, use_cpu=True,
        dataloader_persistent_workers=False, seed=0, max_grad_norm=0.0)
    trainer = TimedTrainer(model=model, args=args, train_dataset=Samples(train),
                           eval_dataset=Samples(valid, seed=1) if eval_steps else None,
                           data_collator=Collate(clock if workers == 0 else None),
                           optimizers=(NapSGD(model.parameters(), lr=0.01), None),
                           callbacks=[clock, *callbacks])
    trainer.clock = clock
    return trainer, clock
