"""The public script both tools run unmodified: Lightning's own demo model (BoringModel from
lightning.pytorch.demos: a Linear(32, 2), 64 random samples in batches of 1) fitted for one
epoch with a default Trainer, as Lightning's examples/app_multi_node/train.py does. Nothing is
downloaded. bench/traceml/compare.sh runs it bare, under `stepwatch run` and `traceml run`."""
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel

if __name__ == "__main__":
    Trainer(max_epochs=1).fit(BoringModel())
