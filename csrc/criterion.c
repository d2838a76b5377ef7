/* criterion.c -- PLACEHOLDER until written */
#include "kbench.h"
int kb_criterion_module_init(PyObject *m) { (void)m; return 0; }
