"""The instruction window of bench/traceml/compare.sh: on PYTHONPATH, this module is imported
by every Python process of a run (site imports sitecustomize at start-up), so the training
script stays unmodified. In a process running under callgrind (`--instr-atstart=no`), it
counts the instructions from the end of optimizer step FIRST to the end of step FIRST+STEPS
(STEPWATCH_CG_WINDOW="FIRST:STEPS"): a global optimizer-step post hook (torch's
register_optimizer_step_post_hook, the same for every tool and for the bare script) starts
counting and, STEPS steps later, dumps the counts (labelled "window STEPS") and stops. The
client requests come from bench/callgrind_marks.c (STEPWATCH_CG_MARKS, its .so). The hook is
installed when torch.optim.optimizer is first imported, not before, so importing torch is
left to the script. Outside valgrind, or without the variables, it does nothing."""
import os
import sys


def _install():
    window, marks = os.environ.get("STEPWATCH_CG_WINDOW"), os.environ.get("STEPWATCH_CG_MARKS")
    if not window or not marks:
        return
    import ctypes
    lib = ctypes.CDLL(marks)
    if not lib.sw_cg_running():
        return
    lib.sw_cg_stop.argtypes = [ctypes.c_char_p]
    first, steps = (int(x) for x in window.split(":"))
    count = [0]

    def after_step(optimizer, args, kwargs):
        count[0] += 1
        if count[0] == first:
            lib.sw_cg_start()
        elif count[0] == first + steps:
            lib.sw_cg_stop(f"window {steps}".encode())

    def register(module):
        module.register_optimizer_step_post_hook(after_step)

    _when_imported("torch.optim.optimizer", register)


def _when_imported(name, then):
    """Call then(module) once the module name has been imported (by whoever imports it)."""
    import importlib.abc
    import importlib.machinery

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname != name:
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None:
                return None
            exec_module = spec.loader.exec_module

            def run(module):
                exec_module(module)
                sys.meta_path.remove(self)
                then(module)

            spec.loader.exec_module = run
            return spec

    sys.meta_path.insert(0, Finder())


_install()
