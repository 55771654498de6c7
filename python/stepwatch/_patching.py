"""Undoing stepwatch's patches without undoing anyone else's.

Every adapter that replaces an attribute (torch's entry points, the modules hooks, the DDP
forward, Lightning's strategy taps) keeps (owner, name, original, wrapper) and restores with
restore(): an attribute that is still our wrapper gets its original back; one that another
tool or the program has wrapped since (TraceML, accelerate's hooks, a debug wrapper) stays as
it is, since putting our original back would remove their patch too. Our wrapper then sits
under theirs and only calls through (the adapter has stopped recording before it restores),
and one line on stderr says which attributes were left so.
"""
import sys

MISSING = object()  # the attribute was not in the owner's own __dict__ (inherited): delete it


def _label(owner, name):
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{name}"
    if hasattr(owner, "__name__"):  # a module
        return f"{owner.__name__}.{name}"
    return f"{type(owner).__name__}(instance).{name}"


def restore(patches, who):
    """Undo patches (a list of (owner, name, original, wrapper), undone last first): each
    attribute still our wrapper gets original back (MISSING: removed). Returns the labels of
    the attributes left wrapped by someone else, said once on stderr (who None: not said, for
    the program's end, where the line would tell nothing anyone can act on)."""
    kept = []
    for owner, name, original, wrapper in reversed(patches):
        if owner.__dict__.get(name) is not wrapper:
            kept.append(_label(owner, name))
            continue
        if original is MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    patches.clear()
    if kept and who is not None:
        print(f"{who}: left {', '.join(kept)} as another wrapper made after stepwatch's has it "
              f"(restoring the original would remove that wrapper too); stepwatch's under it "
              f"records nothing more and only calls through", file=sys.stderr)
    return kept
