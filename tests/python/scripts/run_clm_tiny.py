"""A run_clm.py-like script (transformers' examples/pytorch/language-modeling): a causal LM
loaded from a local directory with AutoModelForCausalLM, token blocks of block_size as
run_clm's group_texts makes them (labels = input_ids), the Trainer's own loop. Nothing of
stepwatch in it: tests/python/test_flops_clm.py runs it under `stepwatch run --flops`.

    python run_clm_tiny.py OUT_DIR     # prints one JSON line: the Trainer's figures
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch  # noqa: E402
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          Trainer, TrainingArguments, default_data_collator)

LAYERS, HEADS, EMBD, BLOCK, VOCAB, BATCH, STEPS = 2, 2, 64, 32, 256, 4, 6


class Blocks(torch.utils.data.Dataset):
    """run_clm's group_texts: the token stream cut into blocks, labels the same ids."""

    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (n, BLOCK), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main(out):
    torch.manual_seed(0)
    model_dir = os.path.join(out, "tiny-gpt2")
    config = GPT2Config(n_layer=LAYERS, n_head=HEADS, n_embd=EMBD, n_positions=BLOCK,
                        vocab_size=VOCAB, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    GPT2LMHeadModel(config).save_pretrained(model_dir)  # the "local model" run_clm loads
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    args = TrainingArguments(output_dir=os.path.join(out, "trainer"),
                             per_device_train_batch_size=BATCH, max_steps=STEPS,
                             logging_steps=2, save_strategy="no", report_to=[], use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Blocks(BATCH * STEPS),
                      data_collator=default_data_collator)
    result = trainer.train()
    print(json.dumps({
        "total_flos": trainer.state.total_flos, "steps": result.global_step,
        "params": model.num_parameters(), "params_no_embeddings":
            model.num_parameters(exclude_embeddings=True),
        "position_params": model.transformer.wpe.weight.numel(),
        "layers": LAYERS, "embd": EMBD, "block": BLOCK, "batch": BATCH}))


if __name__ == "__main__":
    main(sys.argv[1])
