// The name rules the core takes from Python once, at load time, instead of importing
// a Python module from C++ (an import from the core can deadlock under threads and
// ties the core to the package layout).  fastlower._core_loader.load_core() calls
// _core.set_name_rules(fastlower._name_rules.ILLEGAL_NAMES) before it hands the core
// to anyone; a name function used before that raises RuntimeError (NameRulesUnset).
#pragma once

#include <stdexcept>
#include <string>
#include <unordered_set>

#include "namespace.hpp"

namespace fastlower {

// A name function was used before set_name_rules: RuntimeError in Python.
struct NameRulesUnset : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Installs torch.fx's illegal names together with Python's Unicode database for
// non-ASCII names (Py_UNICODE_TODECIMAL, str.lower).  Thread-safe.  The same set again
// is a no-op; a different set serves the namespaces and simulators made afterwards,
// while earlier ones keep the rules they were made with (rule sets are never freed).
void set_name_rules(std::unordered_set<std::string> illegal);

// The rules installed last.  Throws NameRulesUnset before the first set_name_rules.
// Lock-free; lower_unicode calls Python, so name functions run with the GIL held.
const NameHooks &python_name_hooks();

}  // namespace fastlower
