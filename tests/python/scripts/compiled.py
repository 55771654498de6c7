"""torch.compile with its default options on CPU: a compiled module (nested submodules, its
loss computed outside) in training, a compiled function and module.compile() in validations
under no_grad between training steps. Prints the graph breaks and graphs torch counted, and writes the loop's
own timings (torchtruth) to the path in argv[1]."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from torchtruth import Truth  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.out(self.inner(x))


def main():
    truth = Truth()
    torch.manual_seed(0)
    model = Block()
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    @torch.compile
    def loss_of(x, y):
        return F.mse_loss(model(x), y)

    other = Block()
    other.compile()
    x, y = torch.randn(4, 8), torch.randn(4, 1)

    def train_step():
        with truth.part("forward"):
            out = compiled(x)
        with truth.part("loss"):
            loss = F.mse_loss(out, y)
        with truth.part("backward"):
            loss.backward()
        with truth.part("optimizer"):
            opt.step()
        truth.step_done()
        with truth.part("zero_grad"):
            opt.zero_grad()

    for validate in (loss_of, other):  # a compiled function, then module.compile()
        for i in range(3):
            train_step()
        with torch.no_grad():
            for i in range(3):  # a step ends when the model is called again
                with truth.part("forward", "valid"):
                    validate(x, y) if validate is loss_of else validate(x)
                truth.step_done("valid")
    truth.dump(sys.argv[1])
    print("graph_breaks", sum(counters["graph_break"].values()),
          "graphs", counters["stats"]["unique_graphs"])


if __name__ == "__main__":
    main()
