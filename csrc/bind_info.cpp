// Area "info": build/version metadata of the native extension.
#include <string>

#include "bindings.hpp"

#ifndef FASTLOWER_VERSION
#define FASTLOWER_VERSION "0.1.0"
#endif

// Bumped with every change to a bound function's name, arguments or results;
// fastlower/_core_loader.py refuses an extension built for another interface
// (a stale build left in site-packages) and falls back to the Python twin.
#ifndef FASTLOWER_CORE_INTERFACE
#define FASTLOWER_CORE_INTERFACE 12
#endif

#define FASTLOWER_STR2(x) #x
#define FASTLOWER_STR(x) FASTLOWER_STR2(x)

namespace fastlower {

namespace {

std::string abi_string() {
    std::string s = "pybind11-" FASTLOWER_STR(PYBIND11_VERSION_MAJOR) "." FASTLOWER_STR(
        PYBIND11_VERSION_MINOR) "." FASTLOWER_STR(PYBIND11_VERSION_PATCH);
    s += ";py" FASTLOWER_STR(PY_MAJOR_VERSION) "." FASTLOWER_STR(PY_MINOR_VERSION);
    s += ";cxx" + std::to_string(__cplusplus);
#if defined(__clang__)
    s += ";clang-" __clang_version__;
#elif defined(__GNUC__)
    s += ";gcc-" FASTLOWER_STR(__GNUC__) "." FASTLOWER_STR(__GNUC_MINOR__);
#endif
#if defined(_GLIBCXX_USE_CXX11_ABI)
    s += ";glibcxx_cxx11_abi=" FASTLOWER_STR(_GLIBCXX_USE_CXX11_ABI);
#endif
#ifdef NDEBUG
    s += ";release";
#else
    s += ";debug";
#endif
    return s;
}

}  // namespace

void register_info(py::module_ &m) {
    m.attr("INTERFACE") = FASTLOWER_CORE_INTERFACE;
    m.def("version", []() { return std::string(FASTLOWER_VERSION); },
          "Version of the native extension (matches the fastlower package version).");
    m.def("abi", &abi_string,
          "Build/ABI description string: pybind11 version, Python, C++ standard, compiler.");
}

}  // namespace fastlower
