/* pyutil.c -- small CPython/NumPy helpers every file uses (declared in kbench.h). A leaf: it
 * calls nothing of kbench's, so using it ties no file to the module glue (module.c). */
#include "kbench.h"
#include "kb_numpy.h"

#include <stdarg.h>
#include <string.h>

int kb_dict_set_steal(PyObject *d, const char *key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

PyObject *kb_array_copy(const void *data, Py_ssize_t n, int typenum, size_t elsize)
{
    npy_intp dims[1] = {(npy_intp)n};
    PyObject *a = PyArray_SimpleNew(1, dims, typenum);
    if (a != NULL && n > 0)
        memcpy(PyArray_DATA((PyArrayObject *)a), data, (size_t)n * elsize);
    return a;
}

void kb_add_exception_note(const char *fmt, ...)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL) {
        va_list ap;
        va_start(ap, fmt);
        PyObject *note = PyUnicode_FromFormatV(fmt, ap);
        va_end(ap);
        if (note != NULL && PyObject_HasAttrString(value, "add_note")) {
            PyObject *r = PyObject_CallMethod(value, "add_note", "O", note);
            Py_XDECREF(r);
        } else if (note != NULL) {
            /* Python 3.10: no add_note; PEP 678's __notes__ list, as
             * kbench.measure.prepare.add_note keeps it (pytest shows it; 3.10's own traceback does
             * not) */
            PyObject *notes = PyObject_GetAttrString(value, "__notes__");
            if (notes == NULL || !PyList_Check(notes)) {
                PyErr_Clear();
                Py_XDECREF(notes);
                notes = PyList_New(0);
                if (notes != NULL && PyObject_SetAttrString(value, "__notes__", notes) < 0) {
                    Py_CLEAR(notes);
                }
            }
            if (notes != NULL)
                PyList_Append(notes, note);
            Py_XDECREF(notes);
        }
        Py_XDECREF(note);
        PyErr_Clear();
    }
    PyErr_Restore(type, value, tb);
}

int kb_err_is_refusal(void)
{
    return PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError);
}
