/*
 * _module_def.c — the module's definition: its name, its doc and the size of its state.
 *
 * The identity every type file finds the module state by (sw_py_state_of_type,
 * _stepwatch.h). It depends on nothing, so that no type file depends on _stepwatch.c, which
 * registers them all: _stepwatch.c fills in the functions, the exec slot and the GC hooks
 * at PyInit__stepwatch.
 */
#include "_stepwatch.h"

PyModuleDef sw_py_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stepwatch._stepwatch",
    .m_doc = "The C core of stepwatch: profiler, actions, phases, steps, reports, Timer.",
    .m_size = sizeof(module_state),
};
