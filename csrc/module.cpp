// fastlower._core: native planning core. Each area registers itself here.
#include "bindings.hpp"

PYBIND11_MODULE(_core, m) {
    m.doc() = "fastlower native core (C++17, pybind11)";
    fastlower::register_info(m);
    fastlower::register_grouping(m);
    fastlower::register_contract(m);
    fastlower::register_identity(m);
    fastlower::register_namespace(m);
    fastlower::register_fusion(m);
    fastlower::register_partition(m);
    fastlower::register_meta_watch(m);
    fastlower::register_hqq(m);
}
