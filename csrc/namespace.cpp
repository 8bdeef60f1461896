#include "namespace.hpp"

#include <algorithm>
#include <vector>

namespace fastlower {

namespace {

inline bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
inline bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_word(char c) { return is_lower(c) || is_upper(c) || is_digit(c) || c == '_'; }

// ^[a-zA-Z_][0-9a-zA-Z_]*$ with Python's `$` (also matches before one final
// "\n"); on success body_len is the length without that newline.
bool match_word(const std::string &s, size_t &body_len) {
    size_t end = s.size();
    if (end && s[end - 1] == '\n') --end;
    if (end == 0) return false;
    if (!(is_lower(s[0]) || is_upper(s[0]) || s[0] == '_')) return false;
    for (size_t i = 1; i < end; ++i)
        if (!is_word(s[i])) return false;
    body_len = end;
    return true;
}

// int() of a digit run (leading zeros allowed); Unsupported past 18 significant digits.
template <class DigitAt>
int64_t suffix_value(size_t n, DigitAt digit_at, const std::string &s) {
    size_t z = 0;
    while (z + 1 < n && digit_at(z) == 0) ++z;  // int("007") == 7
    if (n - z > 18) throw Unsupported("numeric name suffix too large: " + s);
    int64_t v = 0;
    for (size_t i = z; i < n; ++i) v = v * 10 + digit_at(i);
    return v;
}

// Non-greedy base + optional _(\d+): the only possible split is at the '_'
// right before the trailing digit run.
void split_body(const std::string &s, size_t end, SplitResult &r) {
    size_t d = end;
    while (d > 0 && is_digit(s[d - 1])) --d;
    if (d < end && d >= 2 && s[d - 1] == '_') {
        r.base = s.substr(0, d - 1);
        r.has_num = true;
        r.num = suffix_value(end - d, [&](size_t i) { return s[d + i] - '0'; }, s);
    } else {
        r.base = s.substr(0, end);
        r.has_num = false;
        r.num = 0;
    }
}

// The code point starting at byte i of UTF-8 `s` and its length in bytes (a stray
// byte counts as one code point; the core only sees valid UTF-8 from Python).
uint32_t utf8_at(const std::string &s, size_t i, size_t &len) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (i + len > s.size()) len = 1;
    if (len == 1) return c;
    uint32_t cp = c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    return cp;
}

// ^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$ on a string with non-ASCII characters. The
// classes are ASCII but `\d` is any Unicode decimal digit, so a non-ASCII string
// matches only as ASCII base + '_' + a decimal run holding every non-ASCII character.
bool match_unicode(const std::string &s, const NameHooks &hooks, SplitResult &r) {
    size_t end = s.size();
    if (end && s[end - 1] == '\n') --end;  // Python's `$` also matches before a final "\n"
    std::vector<size_t> offsets;          // byte offset of each code point of s[0, end)
    std::vector<int> values;              // its decimal value, -1 if none
    for (size_t i = 0, len = 0; i < end; i += len) {
        const uint32_t cp = utf8_at(s, i, len);
        offsets.push_back(i);
        values.push_back(cp < 0x80 ? (is_digit(static_cast<char>(cp)) ? static_cast<int>(cp - '0') : -1)
                                   : hooks.decimal_value(cp));
    }
    size_t d = values.size();  // start of the trailing decimal run, in code points
    while (d > 0 && values[d - 1] >= 0) --d;
    if (d == values.size() || d < 2) return false;
    const size_t base_end = offsets[d - 1];
    if (s[base_end] != '_' || !(is_lower(s[0]) || is_upper(s[0]) || s[0] == '_')) return false;
    for (size_t i = 1; i < base_end; ++i)
        if (!is_word(s[i])) return false;
    r.candidate = s;
    r.base = s.substr(0, base_end);
    r.has_num = true;
    r.num = suffix_value(values.size() - d, [&](size_t i) { return values[d + i]; }, s);
    return true;
}

}  // namespace

bool is_ascii(const std::string &s) {
    for (unsigned char c : s)
        if (c >= 0x80) return false;
    return true;
}

std::string snake_case(const std::string &s, const NameHooks &hooks) {
    std::string out;
    out.reserve(s.size() + 4);
    // a byte-wise look-behind is exact on UTF-8: ASCII bytes never occur inside
    // a multi-byte sequence
    for (size_t i = 0; i < s.size(); ++i) {
        if (i > 0 && is_upper(s[i]) && is_lower(s[i - 1])) out.push_back('_');
        out.push_back(s[i]);
    }
    if (is_ascii(out)) {
        for (char &c : out)
            if (is_upper(c)) c = static_cast<char>(c - 'A' + 'a');
        return out;
    }
    return hooks.lower_unicode(out);
}

SplitResult split_name(const std::string &s, const NameHooks &hooks) {
    SplitResult r;
    size_t end = 0;
    if (is_ascii(s)) {
        if (match_word(s, end)) {
            r.candidate = s;
            split_body(s, end, r);
            return r;
        }
    } else if (match_unicode(s, hooks, r)) {
        return r;
    }
    // [^0-9a-zA-Z_]+ -> "_": byte-wise is exact on UTF-8, whose multi-byte sequences
    // hold no ASCII byte; the result is ASCII
    std::string c;
    c.reserve(s.size() + 1);
    bool in_run = false;
    for (char ch : s) {
        if (is_word(ch)) {
            c.push_back(ch);
            in_run = false;
        } else if (!in_run) {
            c.push_back('_');
            in_run = true;
        }
    }
    if (c.empty()) c = "_unnamed";
    if (is_digit(c[0])) c.insert(c.begin(), '_');
    r.candidate = c;
    split_body(c, c.size(), r);
    return r;
}

int32_t Namespace::intern_base(const std::string &base) {
    auto it = base_ids_.find(base);
    if (it != base_ids_.end()) return it->second;
    int32_t id = static_cast<int32_t>(count.size());
    base_ids_.emplace(base, id);
    count.push_back(0);
    bits_.emplace_back();
    return id;
}

void Namespace::clear() {
    used_.clear();
    std::fill(count.begin(), count.end(), 0);
    for (auto &b : bits_) b.clear();
}

namespace {

// name == f"{base}_{num}" exactly (no leading zeros, no trailing newline)
bool is_base_num(const std::string &name, const std::string &base, int64_t num) {
    const std::string digits = std::to_string(num);
    return name.size() == base.size() + 1 + digits.size() && name.compare(0, base.size(), base) == 0 &&
           name[base.size()] == '_' && name.compare(base.size() + 1, digits.size(), digits) == 0;
}

}  // namespace

void Namespace::set_bit(int32_t base, int64_t num, bool on) {
    if (num < 0 || num >= kBitCap) return;
    auto &b = bits_[base];
    const size_t w = static_cast<size_t>(num >> 6);
    if (w >= b.size()) {
        if (!on) return;
        b.resize(std::max(w + 1, b.size() * 2), 0);
    }
    const uint64_t bit = uint64_t(1) << (num & 63);
    if (on)
        b[w] |= bit;
    else
        b[w] &= ~bit;
}

bool Namespace::used_num(int32_t base, const std::string &base_str, int64_t num) const {
    if (num >= 0 && num < kBitCap) {
        const auto &b = bits_[base];
        const size_t w = static_cast<size_t>(num >> 6);
        return w < b.size() && ((b[w] >> (num & 63)) & 1);
    }
    return used(base_str + "_" + std::to_string(num));
}

int64_t Namespace::next_free(int32_t base, const std::string &base_str, int64_t num) const {
    int64_t n = num + 1;
    const auto &b = bits_[base];
    while (n >= 0 && n < kBitCap) {
        const size_t w = static_cast<size_t>(n >> 6);
        if (w >= b.size()) return n;
        const uint64_t free_bits = ~b[w] >> (n & 63);
        if (free_bits) return n + __builtin_ctzll(free_bits);
        n = static_cast<int64_t>(w + 1) << 6;
    }
    while (used_num(base, base_str, n)) ++n;
    return n;
}

void Namespace::add(const std::string &name, int32_t base, bool has_num, int64_t num, const std::string &base_str) {
    used_.insert(name);
    if (has_num && is_base_num(name, base_str, num)) set_bit(base, num, true);
}

void Namespace::remove(const std::string &name) {
    if (!used_.erase(name)) return;
    SplitResult r = split_name(name, *hooks_);
    if (r.has_num && is_base_num(name, r.base, r.num)) set_bit(intern_base(r.base), r.num, false);
}

NameInfo Namespace::create_info(const std::string &cand_in) {
    SplitResult r = split_name(cand_in, *hooks_);
    NameInfo info;
    info.base = intern_base(r.base);
    std::string &cand = r.candidate;
    int64_t num;
    bool renamed = false;
    if (!r.has_num || used(cand)) {
        num = count[info.base];
        if (hooks_->illegal && hooks_->illegal->count(cand)) {
            num += 1;
            cand = r.base + "_" + std::to_string(num);
            renamed = true;
        }
    } else {
        num = r.num;
    }
    // while candidate in used: num += 1; candidate = f"{base}_{num}"
    if (used(cand)) {
        num = next_free(info.base, r.base, num);
        cand = r.base + "_" + std::to_string(num);
        renamed = true;
    }
    info.has_num = r.has_num || renamed;
    info.num = num;
    add(cand, info.base, info.has_num, num, r.base);
    count[info.base] = num;
    info.name = std::move(cand);
    return info;
}

}  // namespace fastlower
