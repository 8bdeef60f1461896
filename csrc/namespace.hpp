// FX node-name allocation (torch.fx.graph._Namespace.create_name), twin:
// fastlower/_twin/namespace.py (rules: fastlower/_name_rules.py).  Plain C++; the
// caller supplies the rules it cannot know by itself (NameHooks): the illegal-name
// set, which torch.fx builds at run time from Python's keywords and builtins, and the
// Unicode database for the (rare) non-ASCII names.
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
    // Decimal value (0..9) of a Unicode code point, -1 when it is not a decimal digit:
    // what `\d` matches and int() reads in a Python str pattern (str.isdecimal).
    std::function<int(uint32_t)> decimal_value;
    // str.lower() of a UTF-8 string with non-ASCII characters
    std::function<std::string(const std::string &)> lower_unicode;
};

bool is_ascii(const std::string &s);
// re.sub(r"(?<=[a-z])([A-Z])", r"_\1", s).lower()
std::string snake_case(const std::string &s, const NameHooks &hooks);
// _name_rules.split_name; throws Unsupported when the suffix has more than 18
// significant digits (the counts stay far from int64's limit).
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
    // drop a name from the used set (it must have been created here)
    void remove(const std::string &name);
    // forget every name and count (a fresh _Namespace keeping interned bases)
    void clear();

    std::vector<int64_t> count;  // base_count per interned base (0 == absent)

  private:
    bool used(const std::string &name) const { return used_.count(name) != 0; }
    // is f"{base}_{num}" used?  The names of that exact form are also kept as
    // bits per base, so probing for the next free suffix scans words, not strings.
    bool used_num(int32_t base, const std::string &base_str, int64_t num) const;
    int64_t next_free(int32_t base, const std::string &base_str, int64_t num) const;
    void set_bit(int32_t base, int64_t num, bool on);
    void add(const std::string &name, int32_t base, bool has_num, int64_t num, const std::string &base_str);

    static constexpr int64_t kBitCap = int64_t(1) << 20;
    const NameHooks *hooks_;
    std::unordered_set<std::string> used_;
    std::vector<std::vector<uint64_t>> bits_;  // per base id
    std::unordered_map<std::string, int32_t> base_ids_;
};

}  // namespace fastlower
