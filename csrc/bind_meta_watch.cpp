// Area "meta watch": MetaWatch (twin: fastlower/_twin/meta_watch.py).
//
// Whether anything torch.fx's get_source_partitions reads from the nodes' ``meta`` dicts
// may have changed since the watch was made, in O(nodes) pointer and integer compares.
// On CPython 3.10 and 3.11 a ``meta`` dict whose version tag (PEP 509: bumped on every
// change of the dict) is unchanged was not written; one that was written, and on 3.12+
// (which deprecate the tag) every one, is looked at: the values of ``source_fn_stack``,
// ``torch_fn`` and ``nn_module_stack`` must be the same objects (then its new version is
// recorded, so a write of another key, which partitioners make, costs one look).  A
// ``source_fn_stack`` list is checked by size and last item and an ``nn_module_stack``
// dict by its items, held (in-place edits); everything else read is a tuple (immutable).
// Values of another type are declined (Unsupported): the caller then keeps no index.  The
// twin compares the same identities on every node.
#include <Python.h>

#include <cstdint>
#include <vector>

#include "bindings.hpp"
#include "namespace.hpp"  // Unsupported

// PEP 509's dict version tag, as CPython 3.10 and 3.11 maintain it; later versions
// deprecate it, and there every meta dict counts as written (its values are compared)
#if PY_VERSION_HEX < 0x030C0000
#define FASTLOWER_DICT_VERSIONS 1
#else
#define FASTLOWER_DICT_VERSIONS 0
#endif

namespace fastlower {

namespace {

struct Watched {
    // strong refs: no address reuse; stack/torch_fn/module_stack are None when absent
    py::object meta, stack, stack_last, torch_fn, module_stack;
    std::vector<py::object> module_items;  // key, value, key, value, ... (held: no reuse)
    uint64_t meta_version = 0;
    Py_ssize_t stack_size = -1;  // -1: not a list
};

#if FASTLOWER_DICT_VERSIONS
uint64_t version_of(PyObject *dict) { return reinterpret_cast<PyDictObject *>(dict)->ma_version_tag; }
#else
uint64_t version_of(PyObject *) {
    static uint64_t next = 0;
    return ++next;  // never the recorded one: the values are compared each time
}
#endif

// the items of an nn_module_stack dict, in order
std::vector<py::object> items_of(PyObject *dict) {
    std::vector<py::object> items;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        items.push_back(py::reinterpret_borrow<py::object>(key));
        items.push_back(py::reinterpret_borrow<py::object>(value));
    }
    return items;
}

bool same_items(PyObject *dict, const std::vector<py::object> &items) {
    if (static_cast<size_t>(PyDict_GET_SIZE(dict)) * 2 != items.size()) return false;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    size_t at = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (key != items[at].ptr() || value != items[at + 1].ptr()) return false;
        at += 2;
    }
    return true;
}

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
        w.module_items = items_of(modules.ptr());
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
            if (PyDict_CheckExact(w.module_stack.ptr()) && !same_items(w.module_stack.ptr(), w.module_items))
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
