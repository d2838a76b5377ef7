/* coldcache.c -- PLACEHOLDER until written */
#include "kbench.h"
int kb_coldcache_module_init(PyObject *m) { (void)m; return 0; }
