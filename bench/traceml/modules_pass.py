"""stepwatch's modules table for bench/traceml/train.py, unmodified: stepwatch.torch with a
Profiler(modules=1) (every step sampled) around the script, run as __main__. A pass of its
own, not timed: `stepwatch run` has no --modules option yet.
    python bench/traceml/modules_pass.py train.py run.db"""
import runpy
import sys

import stepwatch
import stepwatch.torch

script, run_file = sys.argv[1], sys.argv[2]
prof = stepwatch.Profiler(name="modules", modules=1, run_file=run_file)
stepwatch.torch.instrument(prof)
sys.argv = [script]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    stepwatch.torch.uninstrument()
    print(prof.report())
    prof.close()
