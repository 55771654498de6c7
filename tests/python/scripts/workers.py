"""A DataLoader with worker processes (argv[2]: fork or spawn), a module as the transform in
__getitem__ (run in the workers), two epochs. Writes the loop's own timings (torchtruth) to
the path in argv[1]."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from torchtruth import Batches, NapLoss, Truth, model_and_opt, train_step  # noqa: E402


def main():
    truth = Truth()
    model, opt = model_and_opt()
    loss_fn = NapLoss()
    loader = DataLoader(Batches(6, transform=torch.nn.Tanh()), batch_size=None, num_workers=2,
                        multiprocessing_context=sys.argv[2])
    for _epoch in range(2):
        for x, y in truth.loader(loader):
            train_step(truth, model, opt, loss_fn, x, y)
    truth.dump(sys.argv[1])


if __name__ == "__main__":  # spawn imports this file again in each worker
    main()
