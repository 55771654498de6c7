"""stepwatch's autorun as the script TraceML runs, so that both tools time the same steps of
one process (bench/traceml/compare.sh's joint pass):
    traceml run bench/traceml/both.py --args run_clm.py ARGS...
stepwatch (its package on PYTHONPATH, settings from STEPWATCH_* variables) then runs
run_clm.py, unmodified, as __main__ inside TraceML's worker. (A path to stepwatch/autorun.py
itself would put stepwatch's package folder first on sys.path, where its lightning.py hides
the lightning package.)"""
import sys

from stepwatch.autorun import main

sys.exit(main())
