// Binding-side glue for the name allocator: torch.fx's illegal names and the
// Python fallbacks for non-ASCII strings, taken from fastlower._twin.namespace
// so that both implementations use the very same definitions.
#pragma once

#include "namespace.hpp"

namespace fastlower {

// Built on first use (imports fastlower._twin.namespace); lives for the process.
const NameHooks &python_name_hooks();

}  // namespace fastlower
