"""A loop with no optimizer object: the update is written by hand (p.add_ under no_grad),
so a training step ends with its backward. Run under `stepwatch run` in a process that has
made no optimizer; writes the loop's own timings (torchtruth) to the path in argv[1]."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from torchtruth import Batches, NapLoss, Net, Truth, forward_loss_backward, nap  # noqa: E402

truth = Truth()
torch.manual_seed(0)
model = Net()
loss_fn = NapLoss()
for x, y in truth.loader(DataLoader(Batches(6), batch_size=None)):
    forward_loss_backward(truth, model, loss_fn, x, y)
    truth.step_done()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-0.01)
            p.grad = None
    nap("other")
truth.dump(sys.argv[1])
