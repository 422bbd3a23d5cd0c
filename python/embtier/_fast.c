/*
 * _fast.c - the CPython extension module embtier's EmbeddingBagCollection
 * calls its plan (_tables.c) through, instead of ctypes: a step makes
 * three calls, each after the library's work has evicted Python's code
 * and data from the CPU's caches, and there a ctypes call (its argtypes'
 * conversions, libffi) costs about 8 us against 2 us warm; this module's
 * calls take their arguments as plain ints and floats (METH_FASTCALL).
 *
 * It does not link to the library: bind() takes the addresses of
 * etpy_plan_prefetch, etpy_plan_gather and etpy_plan_update (from ctypes),
 * so that python/bench_overhead.py can bind no-ops of the same signatures
 * in their place to time the binding alone. `make python` builds it into
 * build-python/python/_embtier_fast.so; without it, the package makes the
 * same calls with ctypes.
 *
 *   bind(prefetch, gather, update)
 *   prefetch(store, plan, ids, n) -> int
 *   gather(store, plan, ids, nbags, ids_copy, out, failed) -> int
 *   update(store, plan, ids, nbags, grads, lr, eps, failed) -> int
 *
 * Every pointer is an int (0 for NULL); the return value is the C call's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

typedef int (*prefetch_fn)(void *s, void *p, const uint64_t *ids, size_t n);
typedef int (*gather_fn)(void *s, void *p, const uint64_t *ids, size_t nbags,
			 uint64_t *ids_copy, float *out, size_t *failed);
typedef int (*update_fn)(void *s, void *p, const uint64_t *ids, size_t nbags,
			 const float *grads, float lr, float eps,
			 size_t *failed);

static prefetch_fn do_prefetch;
static gather_fn do_gather;
static update_fn do_update;

/* args[0..n) as pointers (ints; None is NULL), false with an exception
 * set on anything else. */
static int pointers(PyObject *const *args, Py_ssize_t n, void **out)
{
	for (Py_ssize_t i = 0; i < n; i++) {
		if (args[i] == Py_None) {
			out[i] = NULL;
			continue;
		}
		out[i] = PyLong_AsVoidPtr(args[i]);
		if (!out[i] && PyErr_Occurred())
			return 0;
	}
	return 1;
}

static int nargs(const char *name, Py_ssize_t got, Py_ssize_t want)
{
	if (got == want)
		return 1;
	PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)",
		     name, want, got);
	return 0;
}

static int unbound(void *fn)
{
	if (fn)
		return 0;
	PyErr_SetString(PyExc_RuntimeError, "_embtier_fast: bind() first");
	return 1;
}

static PyObject *fast_bind(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
	void *p[3];

	if (!nargs("bind", n, 3) || !pointers(args, 3, p))
		return NULL;
	do_prefetch = (prefetch_fn)p[0];
	do_gather = (gather_fn)p[1];
	do_update = (update_fn)p[2];
	Py_RETURN_NONE;
}

static PyObject *fast_prefetch(PyObject *self, PyObject *const *args,
			       Py_ssize_t n)
{
	void *p[4];

	if (!nargs("prefetch", n, 4) || !pointers(args, 4, p) ||
	    unbound(do_prefetch))
		return NULL;
	return PyLong_FromLong(
	    do_prefetch(p[0], p[1], p[2], (size_t)(uintptr_t)p[3]));
}

static PyObject *fast_gather(PyObject *self, PyObject *const *args,
			     Py_ssize_t n)
{
	void *p[7];

	if (!nargs("gather", n, 7) || !pointers(args, 7, p) ||
	    unbound(do_gather))
		return NULL;
	return PyLong_FromLong(do_gather(
	    p[0], p[1], p[2], (size_t)(uintptr_t)p[3], p[4], p[5], p[6]));
}

static PyObject *fast_update(PyObject *self, PyObject *const *args,
			     Py_ssize_t n)
{
	void *p[8];
	double lr, eps;

	if (!nargs("update", n, 8) || !pointers(args, 5, p) ||
	    !pointers(args + 7, 1, p + 7) || unbound(do_update))
		return NULL;
	lr = PyFloat_AsDouble(args[5]);
	if (lr == -1.0 && PyErr_Occurred())
		return NULL;
	eps = PyFloat_AsDouble(args[6]);
	if (eps == -1.0 && PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(do_update(p[0], p[1], p[2],
					 (size_t)(uintptr_t)p[3], p[4],
					 (float)lr, (float)eps, p[7]));
}

static PyMethodDef fast_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))fast_bind, METH_FASTCALL,
     "bind(prefetch, gather, update): the C functions' addresses"},
    {"prefetch", (PyCFunction)(void (*)(void))fast_prefetch, METH_FASTCALL,
     "prefetch(store, plan, ids, n)"},
    {"gather", (PyCFunction)(void (*)(void))fast_gather, METH_FASTCALL,
     "gather(store, plan, ids, nbags, ids_copy, out, failed)"},
    {"update", (PyCFunction)(void (*)(void))fast_update, METH_FASTCALL,
     "update(store, plan, ids, nbags, grads, lr, eps, failed)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef fast_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_embtier_fast",
    .m_doc = "embtier's plan calls without ctypes (python/embtier/_fast.c)",
    .m_size = -1, .m_methods = fast_methods};

PyMODINIT_FUNC PyInit__embtier_fast(void);

PyMODINIT_FUNC PyInit__embtier_fast(void)
{
	return PyModule_Create(&fast_module);
}
