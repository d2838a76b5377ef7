/* measure_host.c -- PLACEHOLDER until written */
#include "kbench.h"
int kb_measure_host_module_init(PyObject *m) { (void)m; return 0; }
