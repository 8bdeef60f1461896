// Area "meta watch": MetaWatch (twin: fastlower/_twin/meta_watch.py).
//
// Whether anything torch.fx's get_source_partitions reads from the nodes' ``meta`` dicts
// may have changed since the watch was made, in O(nodes) pointer and integer compares.
// A ``meta`` dict whose version tag (PEP 509; CPython 3.11 bumps it on every change of the
// dict) is unchanged was not written; one that was written is looked at: the values of
// ``source_fn_stack``, ``torch_fn`` and ``nn_module_stack`` must be the same objects (then
// its new version is recorded, so a write of another key, which partitioners make, costs
// one look).  A ``source_fn_stack`` list is checked by size and last item and an
// ``nn_module_stack`` dict by its version tag (in-place edits); everything else read is a
// tuple (immutable).  Values of another type are declined (Unsupported): the caller then
// keeps no index.  The twin compares the same identities on every node.
#include <Python.h>

#include <cstdint>
#include <vector>

#include "bindings.hpp"
#include "namespace.hpp"  // Unsupported

#if PY_VERSION_HEX >= 0x030C0000
#error "MetaWatch reads PyDictObject::ma_version_tag as CPython 3.11 maintains it"
#endif

namespace fastlower {

namespace {

struct Watched {
    // strong refs: no address reuse; stack/torch_fn/module_stack are None when absent
    py::object meta, stack, stack_last, torch_fn, module_stack;
    uint64_t meta_version = 0, module_version = 0;
    Py_ssize_t stack_size = -1;  // -1: not a list
};

uint64_t version_of(PyObject *dict) { return reinterpret_cast<PyDictObject *>(dict)->ma_version_tag; }

// meta.get(key, None); str keys never raise
py::object get(PyObject *dict, const char *key) {
    PyObject *found = PyDict_GetItemString(dict, key);  // borrowed
    return py::reinterpret_borrow<py::object>(found ? found : Py_None);
}

[[noreturn]] void decline(const char *what) { throw Unsupported(what); }

Watched watch(py::handle meta) {
    if (!PyDict_CheckExact(meta.ptr())) decline("meta is not a dict");
    Watched w;
    w.meta = py::reinterpret_borrow<py::object>(meta);
    w.meta_version = version_of(meta.ptr());
    py::object stack = get(meta.ptr(), "source_fn_stack");
    w.stack = stack;
    if (PyList_CheckExact(stack.ptr())) {
        w.stack_size = PyList_GET_SIZE(stack.ptr());
        if (w.stack_size > 0) {
            w.stack_last = py::reinterpret_borrow<py::object>(PyList_GET_ITEM(stack.ptr(), w.stack_size - 1));
            if (!PyTuple_CheckExact(w.stack_last.ptr())) decline("source_fn_stack[-1] is not a tuple");
        }
    } else if (PyTuple_CheckExact(stack.ptr())) {
        Py_ssize_t size = PyTuple_GET_SIZE(stack.ptr());
        if (size > 0 && !PyTuple_CheckExact(PyTuple_GET_ITEM(stack.ptr(), size - 1)))
            decline("source_fn_stack[-1] is not a tuple");
    } else if (!stack.is_none()) {
        decline("source_fn_stack is not a list or tuple");
    }
    py::object torch_fn = get(meta.ptr(), "torch_fn");
    if (!torch_fn.is_none() && !PyTuple_CheckExact(torch_fn.ptr())) decline("torch_fn is not a tuple");
    w.torch_fn = torch_fn;
    py::object modules = get(meta.ptr(), "nn_module_stack");
    if (PyDict_CheckExact(modules.ptr())) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(modules.ptr(), &pos, &key, &value))
            if (!PyTuple_CheckExact(value)) decline("an nn_module_stack value is not a tuple");
        w.module_version = version_of(modules.ptr());
    } else if (!modules.is_none()) {
        decline("nn_module_stack is not a dict");
    }
    w.module_stack = modules;
    return w;
}

class MetaWatch {
public:
    explicit MetaWatch(py::iterable metas) {
        for (py::handle meta : metas) watched_.push_back(watch(meta));
    }

    bool unchanged() {
        for (Watched &w : watched_) {
            const uint64_t version = version_of(w.meta.ptr());
            if (version != w.meta_version) {  // written: are the values read the same?
                PyObject *meta = w.meta.ptr();
                if (get(meta, "source_fn_stack").ptr() != w.stack.ptr() ||
                    get(meta, "torch_fn").ptr() != w.torch_fn.ptr() ||
                    get(meta, "nn_module_stack").ptr() != w.module_stack.ptr())
                    return false;
                w.meta_version = version;
            }
            if (w.stack_size >= 0) {
                PyObject *stack = w.stack.ptr();
                if (PyList_GET_SIZE(stack) != w.stack_size) return false;
                if (w.stack_size > 0 && PyList_GET_ITEM(stack, w.stack_size - 1) != w.stack_last.ptr())
                    return false;
            }
            if (PyDict_CheckExact(w.module_stack.ptr()) && version_of(w.module_stack.ptr()) != w.module_version)
                return false;
        }
        return true;
    }

    size_t size() const { return watched_.size(); }

private:
    std::vector<Watched> watched_;
};

}  // namespace

void register_meta_watch(py::module_ &m) {
    py::class_<MetaWatch>(m, "MetaWatch",
                          "Whether the get_source_partitions metadata of some nodes may have changed.")
        .def(py::init<py::iterable>(), py::arg("metas"),
             "Watch these ``node.meta`` dicts; Unsupported for a value of an unexpected type.")
        .def("unchanged", &MetaWatch::unchanged,
             "False if anything get_source_partitions reads may have changed since.")
        .def("__len__", &MetaWatch::size);
}

}  // namespace fastlower
