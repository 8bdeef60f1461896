// FX node-name allocation (torch.fx.graph._Namespace.create_name), twin:
// fastlower/_twin/namespace.py.  Plain C++; the binding layer supplies the
// illegal-name set and Python callbacks for the (rare) non-ASCII strings whose
// Unicode regex / lower() semantics are not reimplemented here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace fastlower {

// A graph/name the core cannot represent exactly (e.g. a numeric suffix beyond
// int64); the Python layer falls back to the twin.
struct Unsupported : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct SplitResult {
    std::string candidate;  // sanitised candidate
    std::string base;
    bool has_num = false;
    int64_t num = 0;
};

struct NameHooks {
    // torch.fx.graph._illegal_names
    std::shared_ptr<const std::unordered_set<std::string>> illegal;
    // split_name / str.lower for strings with non-ASCII characters
    std::function<SplitResult(const std::string &)> split_unicode;
    std::function<std::string(const std::string &)> lower_unicode;
};

bool is_ascii(const std::string &s);
// re.sub(r"(?<=[a-z])([A-Z])", r"_\1", s).lower()
std::string snake_case(const std::string &s, const NameHooks &hooks);
// _twin.namespace.split_name; throws Unsupported when the suffix exceeds 10**18.
SplitResult split_name(const std::string &s, const NameHooks &hooks);

struct NameInfo {
    std::string name;
    int32_t base = 0;  // interned base id
    bool has_num = false;
    int64_t num = 0;
};

class Namespace {
  public:
    explicit Namespace(const NameHooks *hooks) : hooks_(hooks) {}

    NameInfo create_info(const std::string &candidate);
    std::string create(const std::string &candidate) { return create_info(candidate).name; }
    int32_t intern_base(const std::string &base);
    // forget every name and count (a fresh _Namespace keeping interned bases)
    void clear();

    std::unordered_set<std::string> used;
    std::vector<int64_t> count;  // base_count per interned base (0 == absent)

  private:
    const NameHooks *hooks_;
    std::unordered_map<std::string, int32_t> base_ids_;
};

}  // namespace fastlower
