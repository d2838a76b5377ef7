/* stats.c -- PLACEHOLDER until written */
#include "kbench.h"
int kb_stats_module_init(PyObject *m) { (void)m; return 0; }
