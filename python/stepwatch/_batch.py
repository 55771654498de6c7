"""The batch size of a collated batch, for samples/s (shared by the adapters)."""


def batch_size(batch):
    """Samples in a batch: the first dimension of its first array-like (tensor, ndarray),
    looking through a few levels of tuples, lists and dicts; 0 when it cannot be told.
    Never raises: it runs inside the user's loop."""
    try:
        return _first_dim(batch)
    except Exception:
        return 0


def _first_dim(batch):
    for _ in range(4):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else 0
        if isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        elif isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        else:
            break
    return 0
