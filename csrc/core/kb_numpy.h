/* kb_numpy.h -- include the NumPy C API once per file; module.c imports it (KB_NUMPY_IMPORT). */
#ifndef KB_NUMPY_H
#define KB_NUMPY_H
#define PY_ARRAY_UNIQUE_SYMBOL kbench_ARRAY_API
#ifndef KB_NUMPY_IMPORT
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>
#endif
