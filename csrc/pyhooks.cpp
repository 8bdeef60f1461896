// Binding-side half of the name rules (see pyhooks.hpp): the registered illegal names
// and the pieces of Python's Unicode handling the core does not reimplement.
#include "pyhooks.hpp"

#include <atomic>
#include <memory>
#include <mutex>

#include "pyconv.hpp"

namespace fastlower {

namespace {

std::mutex install_mutex;                     // serialises set_name_rules
std::atomic<const NameHooks *> installed{nullptr};

// Py_UNICODE_TODECIMAL is the table `\d` and int() use in a str pattern; it reads static
// data only, so it needs no GIL.
int decimal_value(uint32_t cp) { return Py_UNICODE_TODECIMAL(static_cast<Py_UCS4>(cp)); }

// str.lower() itself: full case mapping with its context rules (final sigma), which
// no C++ table here reproduces.  Needs the GIL, which every name function holds.
std::string lower_unicode(const std::string &s) {
    return pyconv::utf8(pyconv::to_str(s).attr("lower")().ptr());
}

}  // namespace

void set_name_rules(std::unordered_set<std::string> illegal) {
    std::lock_guard<std::mutex> lock(install_mutex);
    const NameHooks *current = installed.load(std::memory_order_acquire);
    if (current && *current->illegal == illegal) return;
    auto *hooks = new NameHooks();  // intentionally leaked: namespaces keep a pointer to it
    hooks->illegal = std::make_shared<const std::unordered_set<std::string>>(std::move(illegal));
    hooks->decimal_value = decimal_value;
    hooks->lower_unicode = lower_unicode;
    installed.store(hooks, std::memory_order_release);
}

const NameHooks &python_name_hooks() {
    const NameHooks *hooks = installed.load(std::memory_order_acquire);
    if (!hooks)
        throw NameRulesUnset(
            "fastlower._core: the FX name rules are not set; load the core with "
            "fastlower._core_loader.load_core(), which calls _core.set_name_rules(ILLEGAL_NAMES)");
    return *hooks;
}

}  // namespace fastlower
